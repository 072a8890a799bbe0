// Pure translations between the NCCL API's types and meshcomm's (libmeshcomm_nccl.so; unit-tested on the
// CPU): data types, built-in reduction operators, error codes and their texts, the host value of a
// PreMulSum scalar given as raw element bytes, and the checks of an ncclConfig_t.
#pragma once

#include <optional>
#include <string>

#include "meshcomm/errors.hpp"
#include "meshcomm/nccl.h"
#include "meshcomm/types.hpp"

namespace meshcomm::nccl {

// The meshcomm type of an NCCL data type; nullopt for values outside ncclDataType_t.
std::optional<DataType> dataTypeOf(int ncclType);
// The built-in meshcomm operator of ncclSum..ncclAvg; nullopt otherwise (PreMulSum handles come from
// ncclRedOpCreatePreMulSum and are resolved per communicator).
std::optional<ReduceOp> builtinOpOf(int ncclOp);
// ncclResult_t of a meshcomm error code.
ncclResult_t resultOf(ErrorCode code);
// ncclGetErrorString's text.
const char* resultText(ncclResult_t r);
// The value of one element of `type` stored at `bytes` (host memory), as a double (exact for every type
// except 64-bit integers beyond 2^53).
double elementToDouble(const void* bytes, DataType type);
// Empty if `config` (may be null) is usable, else what is wrong (size/magic/version or an attribute).
std::string configProblem(const ncclConfig_t* config);

}  // namespace meshcomm::nccl
