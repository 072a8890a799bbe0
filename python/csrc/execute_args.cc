// Buffer sizes -> CollectiveArgs for Algorithm.execute (docs/python.md, "Algorithm.execute").
#include "execute_args.hpp"

#include <set>

#include "meshcomm/errors.hpp"

namespace meshcomm::python {

namespace {

constexpr const char* kCountArrays[] = {"send_counts", "send_displs", "recv_counts", "recv_displs"};

bool isRooted(Collective c) {
  return c == Collective::Broadcast || c == Collective::Reduce || c == Collective::Gather ||
         c == Collective::Scatter;
}

class Checker {
 public:
  explicit Checker(const ExecuteRequest& r)
      : r_(r), prefix_(detail::concat("rank ", r.rank, ": ", collectiveName(r.collective), ": execute: ")) {}

  // bytes / element size, requiring a whole number of elements.
  size_t elements(size_t bytes, const char* name) const {
    const size_t elt = dataTypeSize(r_.dtype);
    MESHCOMM_REQUIRE(bytes % elt == 0, prefix_, name, ": ", bytes, " bytes is not a whole number of ",
                     dataTypeName(r_.dtype), " elements (", elt, " bytes each)");
    return bytes / elt;
  }
  // bytes >= factor * needed, overflow-free. `what` names the bound ("input_size", "size x input_size").
  void atLeast(size_t bytes, size_t factor, size_t needed, const char* name, const char* what) const {
    MESHCOMM_REQUIRE(bytes / factor >= needed, prefix_, name, ": ", bytes, " bytes is less than ", what, " (",
                     factor > 1 ? detail::concat(factor, " x ") : std::string(), needed, " bytes)");
  }
  void checkExtras(std::set<std::string> allowed) const {
    for (const auto& [key, value] : r_.extras) {
      if (allowed.count(key)) continue;
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      MESHCOMM_THROW(ErrorCode::InvalidUsage, prefix_, "extras: '", key, "' does not apply (",
                     list.empty() ? std::string("this collective takes no extras") : "accepted: " + list,
                     ")");
    }
  }
  int root() const {
    auto it = r_.extras.find("root");
    if (it == r_.extras.end()) return 0;
    MESHCOMM_REQUIRE(it->second < static_cast<uint64_t>(r_.nRanks), prefix_, "extras: root ", it->second,
                     " is not a rank (size ", r_.nRanks, ")");
    return static_cast<int>(it->second);
  }
  const size_t* countArray(const char* key) const {
    auto it = r_.extras.find(key);
    MESHCOMM_REQUIRE(it != r_.extras.end() && it->second != 0, prefix_, "extras: '", key,
                     "' (a device pointer to ", r_.nRanks, " size_t) is required for alltoallv");
    return reinterpret_cast<const size_t*>(static_cast<uintptr_t>(it->second));
  }
  const std::string& prefix() const { return prefix_; }

 private:
  const ExecuteRequest& r_;
  std::string prefix_;
};

}  // namespace

CollectiveArgs executeArgs(const ExecuteRequest& r) {
  const Checker check(r);
  CollectiveArgs a;
  a.collective = r.collective;
  a.input = reinterpret_cast<const void*>(r.input);
  a.output = reinterpret_cast<void*>(r.output);
  a.dtype = r.dtype;
  a.op = r.op;
  a.stream = reinterpret_cast<cudaStream_t>(r.stream);
  const size_t n = static_cast<size_t>(r.nRanks);

  if (r.collective == Collective::AllToAllv) {
    check.checkExtras({std::begin(kCountArrays), std::end(kCountArrays)});
    a.sendCounts = check.countArray("send_counts");
    a.sendDispls = check.countArray("send_displs");
    a.recvCounts = check.countArray("recv_counts");
    a.recvDispls = check.countArray("recv_displs");
    a.countsLocation = CountsLocation::Device;
    return a;
  }
  check.checkExtras(isRooted(r.collective) ? std::set<std::string>{"root"} : std::set<std::string>{});
  a.root = check.root();
  const bool isRoot = r.rank == a.root;
  switch (r.collective) {
    case Collective::AllReduce:
    case Collective::Reduce:
      a.count = check.elements(r.inputSize, "input_size");
      if (r.collective == Collective::AllReduce || isRoot)
        check.atLeast(r.outputSize, 1, r.inputSize, "output_size", "input_size");
      break;
    case Collective::Broadcast:
      a.count = check.elements(r.outputSize, "output_size");
      if (isRoot) check.atLeast(r.inputSize, 1, r.outputSize, "input_size", "output_size");
      break;
    case Collective::AllGather:
    case Collective::Gather:
      a.count = check.elements(r.inputSize, "input_size");
      if (r.collective == Collective::AllGather || isRoot)
        check.atLeast(r.outputSize, n, r.inputSize, "output_size", "size x input_size");
      break;
    case Collective::ReduceScatter:
    case Collective::Scatter:
      a.count = check.elements(r.outputSize, "output_size");
      if (r.collective == Collective::ReduceScatter || isRoot)
        check.atLeast(r.inputSize, n, r.outputSize, "input_size", "size x output_size");
      break;
    case Collective::AllToAll: {
      const size_t elements = check.elements(r.inputSize, "input_size");
      MESHCOMM_REQUIRE(elements % n == 0, check.prefix(), "input_size: ", elements,
                       " elements do not split evenly over ", n, " ranks");
      a.count = elements / n;
      check.atLeast(r.outputSize, 1, r.inputSize, "output_size", "input_size");
      break;
    }
    case Collective::Barrier:
      a.dtype = DataType::U8;
      break;
    default:
      MESHCOMM_THROW(ErrorCode::InvalidUsage, check.prefix(),
                     "sendrecv runs through Comm.send/recv inside group_start/group_end, not execute");
  }
  return a;
}

}  // namespace meshcomm::python
