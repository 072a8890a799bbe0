// The names of the plan format and the fields of each op (docs/dsl.md, "The plan").
#include "plan/plan_format.hpp"

#include <algorithm>

#include "plan/device_plan.hpp"

namespace meshcomm::plan {

namespace detail {

const std::vector<Named<OpKind>> kOpNames = {
    {OpKind::Copy, "copy"},
    {OpKind::Reduce, "reduce"},
    {OpKind::Put, "put"},
    {OpKind::Get, "get"},
    {OpKind::Signal, "signal"},
    {OpKind::Wait, "wait"},
    {OpKind::Flush, "flush"},
    {OpKind::PutPackets, "put_packets"},
    {OpKind::UnpackPackets, "unpack_packets"},
    {OpKind::ReducePackets, "reduce_packets"},
    {OpKind::Barrier, "barrier"},
};

const std::vector<Named<BufferKind>> kBufferNames = {
    {BufferKind::Input, "input"},
    {BufferKind::Output, "output"},
    {BufferKind::Scratch, "scratch"},
};

const std::vector<Named<ChannelType>> kChannelTypeNames = {
    {ChannelType::Memory, "memory"},
    {ChannelType::Port, "port"},
};

const std::vector<Named<Protocol>> kProtocolNames = {
    {Protocol::Simple, "Simple"},
    {Protocol::LL, "LL"},
};

// The format's own spelling (the same as collectiveName()), so that the plan code stands alone.
const std::vector<Named<Collective>> kCollectiveNames = {
    {Collective::AllReduce, "allreduce"},
    {Collective::AllGather, "allgather"},
    {Collective::ReduceScatter, "reduce_scatter"},
    {Collective::AllToAll, "alltoall"},
};

std::vector<std::string> traceEventNames() {
  std::vector<std::string> names = {"start", "prologue", "staged", "end"};
  for (const auto& op : kOpNames) {
    const size_t code = kFirstOpEvent + static_cast<size_t>(op.value);
    if (names.size() <= code) names.resize(code + 1);
    names[code] = std::string("op:") + op.name;
  }
  return names;
}

const std::vector<std::string_view>& opFields(OpKind kind) {
  static const std::vector<std::string_view> kCopy = {"src", "dst"};
  static const std::vector<std::string_view> kReduce = {"srcs", "dst"};
  static const std::vector<std::string_view> kTransfer = {"channel", "src", "dst"};
  static const std::vector<std::string_view> kSync = {"channel", "relaxed"};
  static const std::vector<std::string_view> kFlush = {"channel"};
  static const std::vector<std::string_view> kReducePackets = {"srcs", "packets", "dst"};
  static const std::vector<std::string_view> kBarrier = {"threadblocks"};
  switch (kind) {
    case OpKind::Copy:
    case OpKind::UnpackPackets:
      return kCopy;
    case OpKind::Reduce:
      return kReduce;
    case OpKind::Put:
    case OpKind::Get:
    case OpKind::PutPackets:
      return kTransfer;
    case OpKind::Signal:
    case OpKind::Wait:
      return kSync;
    case OpKind::Flush:
      return kFlush;
    case OpKind::ReducePackets:
      return kReducePackets;
    case OpKind::Barrier:
      return kBarrier;
  }
  return kBarrier;
}

bool opHasField(OpKind kind, std::string_view field) {
  const auto& fields = opFields(kind);
  return std::find(fields.begin(), fields.end(), field) != fields.end();
}

}  // namespace detail

const char* opName(OpKind kind) {
  return detail::nameOf(detail::kOpNames, kind);
}

}  // namespace meshcomm::plan
