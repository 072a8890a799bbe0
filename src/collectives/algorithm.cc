// Collective names, the byte size and in-place test of a request, and the algorithm collection.
#include "meshcomm/algorithm.hpp"

#include <algorithm>
#include <limits>

#include "meshcomm/errors.hpp"

namespace meshcomm {

namespace {

constexpr const char* kCollectiveNames[kNumCollectives] = {
    "allreduce", "allgather", "reduce_scatter", "broadcast", "reduce",  "gather",
    "scatter",   "alltoall",  "alltoallv",      "sendrecv",  "barrier",
};

// alltoallv with counts in device memory: the host cannot read them without a sync, so selection assumes
// a large message (the scratch-based algorithms, which handle any size).
constexpr size_t kUnknownAllToAllvBytes = std::numeric_limits<size_t>::max() / 2;

size_t sumCounts(const size_t* counts, int n) {
  size_t total = 0;
  if (counts == nullptr) return 0;
  for (int i = 0; i < n; ++i) total += counts[i];
  return total;
}

size_t allToAllvBytes(const CollectiveArgs& a, int nRanks, size_t elt) {
  if (a.countsLocation == CountsLocation::Device) return kUnknownAllToAllvBytes;
  return std::max(sumCounts(a.sendCounts, nRanks), sumCounts(a.recvCounts, nRanks)) * elt;
}

size_t sendRecvBytes(const CollectiveArgs& a, size_t elt) {
  size_t largest = 0;
  for (size_t i = 0; i < a.numP2POps && a.p2pOps != nullptr; ++i)
    largest = std::max(largest, a.p2pOps[i].count);
  return largest * elt;
}

}  // namespace

const char* collectiveName(Collective c) {
  const int i = static_cast<int>(c);
  return i < kNumCollectives ? kCollectiveNames[i] : "invalid";
}

bool sizeIsRankLocal(Collective c) {
  return c == Collective::AllToAllv || c == Collective::SendRecv;
}

size_t CollectiveArgs::messageBytes(int nRanks) const {
  const size_t elt = dataTypeSize(dtype);
  const size_t n = static_cast<size_t>(nRanks);
  switch (collective) {
    case Collective::AllReduce:
    case Collective::Broadcast:
    case Collective::Reduce:
      return count * elt;
    case Collective::AllGather:      // the output
    case Collective::Gather:         // the root's output
    case Collective::ReduceScatter:  // the input
    case Collective::Scatter:        // the root's input
    case Collective::AllToAll:       // input (= output)
      return n * count * elt;
    case Collective::AllToAllv:
      return allToAllvBytes(*this, nRanks, elt);
    case Collective::SendRecv:
      return sendRecvBytes(*this, elt);
    case Collective::Barrier:
      return 0;
  }
  return 0;
}

bool CollectiveArgs::inPlace(int rank) const {
  const auto* in = static_cast<const char*>(input);
  const auto* out = static_cast<const char*>(output);
  if (in == nullptr || out == nullptr) return false;
  const size_t sliceBytes = count * dataTypeSize(dtype) * static_cast<size_t>(rank);
  switch (collective) {
    case Collective::AllGather:
    case Collective::Gather:
      return in == out + sliceBytes;
    case Collective::ReduceScatter:
    case Collective::Scatter:
      return out == in + sliceBytes;
    case Collective::SendRecv:
    case Collective::Barrier:
      return false;
    default:
      return in == out;
  }
}

void AlgorithmCollection::checkAddable(const Algorithm* algorithm) const {
  MESHCOMM_REQUIRE(algorithm != nullptr, "AlgorithmCollection::add: null algorithm");
  const std::string name = algorithm->name();
  MESHCOMM_REQUIRE(!name.empty(), "AlgorithmCollection::add: an algorithm of ",
                   collectiveName(algorithm->collective()), " has an empty name");
  MESHCOMM_REQUIRE(find(name) == nullptr, "AlgorithmCollection::add: an algorithm named '", name,
                   "' is already registered");
}

void AlgorithmCollection::add(std::shared_ptr<Algorithm> algorithm) {
  checkAddable(algorithm.get());
  algorithms_.push_back(std::move(algorithm));
}

std::shared_ptr<Algorithm> AlgorithmCollection::find(const std::string& name) const {
  for (const auto& a : algorithms_)
    if (a->name() == name) return a;
  return nullptr;
}

std::vector<std::shared_ptr<Algorithm>> AlgorithmCollection::forCollective(Collective c) const {
  std::vector<std::shared_ptr<Algorithm>> out;
  for (const auto& a : algorithms_)
    if (a->collective() == c) out.push_back(a);
  return out;
}

}  // namespace meshcomm
