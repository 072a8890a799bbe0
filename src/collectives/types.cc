// Names and sizes of the element types and reduction operators (nccl-tests spellings).
#include "meshcomm/types.hpp"

namespace meshcomm {

namespace {

struct DataTypeInfo {
  size_t size;
  const char* name;
  bool floatingPoint;
};

constexpr DataTypeInfo kDataTypes[kNumDataTypes] = {
    {4, "float", true},  {2, "half", true},    {2, "bfloat16", true}, {8, "double", true},
    {1, "int8", false},  {1, "uint8", false},  {4, "int32", false},   {4, "uint32", false},
    {8, "int64", false}, {8, "uint64", false}, {1, "f8e4m3", true},   {1, "f8e5m2", true},
};

constexpr const char* kReduceOpNames[] = {"sum", "prod", "min", "max", "avg", "premulsum"};
constexpr int kNumReduceOps = sizeof(kReduceOpNames) / sizeof(kReduceOpNames[0]);

bool validDataType(DataType t) {
  return static_cast<int>(t) < kNumDataTypes;
}

}  // namespace

size_t dataTypeSize(DataType t) {
  return validDataType(t) ? kDataTypes[static_cast<int>(t)].size : 0;
}

const char* dataTypeName(DataType t) {
  return validDataType(t) ? kDataTypes[static_cast<int>(t)].name : "invalid";
}

bool isFloatingPoint(DataType t) {
  return validDataType(t) && kDataTypes[static_cast<int>(t)].floatingPoint;
}

const char* reduceOpName(ReduceOp op) {
  const int i = static_cast<int>(op);
  return i < kNumReduceOps ? kReduceOpNames[i] : "invalid";
}

}  // namespace meshcomm
