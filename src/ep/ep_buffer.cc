// EpBuffer (include/meshcomm/ep/ep_buffer.hpp): the registered region and its peer mappings, the device
// counters and scratch, argument checks, and the launches of ep_kernels.cu.
#include "meshcomm/ep/ep_buffer.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "core/device_trace.hpp"
#include "ep/ep_kernels.cuh"
#include "ep/network_channels.hpp"
#include "ep/peer_regions.hpp"
#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"
#include "meshcomm/host_poll.hpp"

namespace meshcomm::ep {

namespace {

constexpr int kRegionTag = 0x3c00000 + 64;   // distinct from the collectives' and Window's exchange tags
constexpr int kNetworkTag = kRegionTag + 1;  // .. + 3 (NetworkChannels)

}  // namespace

class EpBuffer::Impl {
 public:
  Impl(Comm& comm, size_t bytes, int blocks, size_t networkBytes)
      : comm_(comm),
        rank_(comm.rank()),
        size_(comm.size()),
        bytes_(bytes),
        nodeSize_(nodeSizeOf(comm)),
        layout_(RegionLayout::of(bytes)) {
    MESHCOMM_REQUIRE(bytes % 256 == 0 && bytes > layout_.headerBytes(), "rank ", rank_, ": EpBuffer: ", bytes,
                     " bytes; a multiple of 256 above ", layout_.headerBytes(), " is needed");
    CudaDeviceGuard guard(comm.cudaDevice());
    blocks_ = blocks;
    // A dispatch runs its send and receive kernels side by side on a split of the blocks.
    const int64_t receive = envInt("MESHCOMM_EP_RECEIVE_BLOCKS");
    receiveBlocks_ = receive > 0 ? static_cast<int>(receive) : std::max(1, blocks / 2);
    MESHCOMM_REQUIRE(
        blocks >= 2 && receiveBlocks_ < blocks && blocks - receiveBlocks_ <= kMaxSendBlocks, "rank ", rank_,
        ": EpBuffer: ", blocks, " blocks, ", receiveBlocks_,
        " of them receiving (MESHCOMM_EP_RECEIVE_BLOCKS); at least 2, at least one sending and at most ",
        kMaxSendBlocks, " sending are needed");
    Communicator& c = comm.communicator();
    regions_ = std::make_unique<PeerRegions>(comm, bytes, blocks, kRegionTag, "EpBuffer");
    const size_t network = networkBytes > 0 ? networkBytes : bytes;
    MESHCOMM_REQUIRE(nodeSize_ == size_ || network > NetworkLayout::of(0).headerBytes(), "rank ", rank_,
                     ": EpBuffer: a network region of ", network, " bytes; more than ",
                     NetworkLayout::of(0).headerBytes(), " are needed across nodes");
    network_ = std::make_unique<NetworkChannels>(comm, nodeSize_, network, kNetworkTag);
    networkState_ = GpuBuffer(sizeof(NetworkState));
    scratch_ = GpuBuffer(sizeof(int32_t) * (kMaxRanks * (kMaxRanks + 1) + 1));
    hostCounts_ = HostMappedBuffer(sizeof(HostCounts));
    std::memset(hostCounts_.host(), 0, sizeof(HostCounts));
    view_ = KernelView{};
    regions_->fill(view_.regions, view_.spin);
    view_.layout = layout_;
    view_.rank = rank_;
    view_.size = size_;
    view_.blocks = blocks_;
    view_.receiveBlocks = receiveBlocks_;
    view_.dispatchEpoch = c.allocateCounter();
    view_.combineEpoch = c.allocateCounter();
    view_.dispatchStarted = c.allocateCounter();
    view_.receiveEpoch = c.allocateCounter();
    view_.receiveStarted = c.allocateCounter();
    view_.countsEpoch = c.allocateCounter();
    view_.combineStarted = c.allocateCounter();
    view_.matrix = static_cast<int32_t*>(scratch_.data());
    view_.receivedRows = view_.matrix + kMaxRanks * (kMaxRanks + 1);
    view_.hostCounts = static_cast<HostCounts*>(hostCounts_.device());
    view_.nodeSize = nodeSize_;
    view_.net = network_->handles();
    view_.network = network_->region();
    view_.netLayout = NetworkLayout::of(network);
    view_.netState = static_cast<NetworkState*>(networkState_.data());
    trace_ = DeviceTraceBuffer::fromEnvironment(
        "ep", rank_,
        {"dispatch:send_start", "dispatch:send_end", "receive:start", "receive:counts", "receive:end",
         "combine:start", "combine:ready", "combine:send_done", "combine:reduce_done"});
    if (trace_) view_.trace = trace_->view();
  }

  // A failure recorded on this rank: a device error, or one of the network proxy.
  void checkError() const {
    comm_.checkError();
    network_->checkError();
  }

  void checkShape(const Shape& s, const char* op) const {
    MESHCOMM_REQUIRE(s.hiddenBytes > 0 && s.hiddenBytes % 16 == 0, "rank ", rank_, ": ", op,
                     ": hidden row of ", s.hiddenBytes, " bytes; a positive multiple of 16 is needed");
    MESHCOMM_REQUIRE(s.scales >= 0 && s.topk >= 0 && s.topk <= 32, "rank ", rank_, ": ", op, ": ", s.scales,
                     " scales and top-", s.topk, " (0 to 32) per token");
    MESHCOMM_REQUIRE(s.numExperts > 0 && s.numExperts % size_ == 0 && s.numExperts <= kMaxExperts, "rank ",
                     rank_, ": ", op, ": ", s.numExperts, " experts; a multiple of the ", size_,
                     " ranks, at most ", kMaxExperts);
  }

  void requirePointer(const void* p, const char* op, const char* argument) const {
    MESHCOMM_REQUIRE(p != nullptr, "rank ", rank_, ": ", op, ": ", argument, " is null");
  }

  Comm& comm_;
  const int rank_, size_;
  const size_t bytes_;
  const int nodeSize_;
  const RegionLayout layout_;
  int blocks_ = 0;
  int receiveBlocks_ = 0;                 // of blocks_, the dispatch receive kernel's
  std::unique_ptr<PeerRegions> regions_;  // this rank's region and every peer's, mapped
  std::unique_ptr<NetworkChannels> network_;
  GpuBuffer networkState_;
  GpuBuffer scratch_;
  HostMappedBuffer hostCounts_;
  KernelView view_{};
  std::unique_ptr<DeviceTraceBuffer> trace_;  // MESHCOMM_TRACE: the kernels' events (EpTraceEvent)
  uint64_t sends_ = 0;     // dispatchSend calls: the last one's ticket is the tag waitReceiveCounts waits for
  uint64_t receives_ = 0;  // sends whose receive epoch has been accounted for (received, or skipped)
  // Sends whose rows signals from other nodes have been awaited (received, or skipped).
  uint64_t signalled_ = 0;
  int localExperts_ = 0;
};

EpBuffer::EpBuffer(Comm& comm, size_t bytes, int blocks, size_t networkBytes)
    : impl_(std::make_unique<Impl>(comm, bytes, blocks, networkBytes)) {}

EpBuffer::~EpBuffer() {
  // Every peer must be done with this region before it goes: drain this GPU, then agree.
  try {
    CudaDeviceGuard guard(impl_->comm_.cudaDevice());
    (void)cudaDeviceSynchronize();
    impl_->comm_.communicator().bootstrap().barrier();
  } catch (const std::exception&) {  // a peer already gone: nothing of ours is read any more
  }
}

int EpBuffer::rank() const {
  return impl_->rank_;
}
int EpBuffer::size() const {
  return impl_->size_;
}
size_t EpBuffer::bytes() const {
  return impl_->bytes_;
}
int EpBuffer::blocks() const {
  return impl_->blocks_;
}
int EpBuffer::nodeSize() const {
  return impl_->nodeSize_;
}
void* EpBuffer::localData() const {
  return impl_->regions_->local() + impl_->layout_.rows;
}
size_t EpBuffer::localDataBytes() const {
  return impl_->bytes_ - impl_->layout_.rows;
}

int64_t EpBuffer::dispatchCapacity(const Shape& shape) const {
  return static_cast<int64_t>(impl_->layout_.rowsBytes / RowLayout::of(shape).stride);
}

int64_t EpBuffer::combineCapacity(const Shape& shape) const {
  return static_cast<int64_t>(impl_->layout_.slabsBytes /
                              (static_cast<uint64_t>(impl_->size_) * SlabLayout::of(shape).stride));
}

void EpBuffer::layout(const int64_t* topkIdx, int tokens, const Shape& shape, const LayoutOutputs& out,
                      cudaStream_t stream) {
  const char* op = "get_dispatch_layout";
  impl_->checkShape(shape, op);
  MESHCOMM_REQUIRE(tokens >= 0 && shape.topk > 0, "rank ", impl_->rank_, ": ", op, ": ", tokens,
                   " tokens with top-", shape.topk, " (a layout needs top-k indices)");
  if (tokens > 0) impl_->requirePointer(topkIdx, op, "topk_idx");
  impl_->requirePointer(out.tokensPerRank, op, "num_tokens_per_rank");
  impl_->requirePointer(out.tokensPerExpert, op, "num_tokens_per_expert");
  if (tokens > 0) impl_->requirePointer(out.tokenInRank, op, "is_token_in_rank");
  CudaDeviceGuard guard(impl_->comm_.cudaDevice());
  kernels::launchLayout(topkIdx, tokens, shape, impl_->size_, impl_->view_.spin[impl_->rank_], out, stream);
}

void EpBuffer::dispatchSend(const DispatchInputs& in, const Shape& shape, cudaStream_t stream) {
  const char* op = "dispatch";
  impl_->checkError();  // a failure of an earlier call that no host wait saw raises here
  impl_->checkShape(shape, op);
  MESHCOMM_REQUIRE(in.tokens >= 0 && in.expertAlignment >= 1, "rank ", impl_->rank_, ": ", op, ": ",
                   in.tokens, " tokens, expert alignment ", in.expertAlignment);
  if (in.tokens > 0) {
    impl_->requirePointer(in.x, op, "x");
    impl_->requirePointer(in.tokenInRank, op, "is_token_in_rank");
    if (shape.topk > 0) impl_->requirePointer(in.topkIdx, op, "topk_idx");
    if (shape.scales > 0) impl_->requirePointer(in.scales, op, "x's scales");
  }
  impl_->requirePointer(in.tokensPerRank, op, "num_tokens_per_rank");
  CudaDeviceGuard guard(impl_->comm_.cudaDevice());
  impl_->localExperts_ = shape.numExperts / impl_->size_;
  KernelView view = impl_->view_;
  if (view.net && impl_->sends_ > impl_->signalled_) {
    // Sends whose receive never ran left their rows signals from other nodes unawaited: await them before
    // this send awaits its count signals on the same channels (a channel's signals are awaited in order).
    kernels::launchSkipNetworkSignals(view, impl_->sends_ - impl_->signalled_, stream);
  }
  impl_->signalled_ = impl_->sends_;
  view.hostTicket = ++impl_->sends_;
  kernels::launchDispatchSend(view, in, shape, stream);
}

ReceiveCounts EpBuffer::waitReceiveCounts(double timeoutSec) {
  const auto* counts = static_cast<const volatile HostCounts*>(impl_->hostCounts_.host());
  // The counts come tens of microseconds after the send kernel starts: spin first (HostPoll), so that the
  // receive kernel, which the caller launches once it has the counts, is not held back by a sleep.
  HostPoll poll;
  while (counts->tag != impl_->sends_) {
    impl_->checkError();  // a peer that never sends its counts is a device timeout
    if (std::chrono::duration<double>(poll.elapsed()).count() > timeoutSec) {
      MESHCOMM_THROW(ErrorCode::Timeout, "rank ", impl_->rank_,
                     ": dispatch: the receive counts did not arrive within ", timeoutSec,
                     " s (a peer may be missing this dispatch)");
    }
    poll.pause();
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  // The send kernel reports a receive that does not fit (it then writes nothing) before it publishes the tag.
  impl_->checkError();
  ReceiveCounts r;
  r.rows = counts->rows;
  r.perLocalExpert.assign(impl_->localExperts_, 0);
  for (int e = 0; e < impl_->localExperts_; ++e) r.perLocalExpert[e] = counts->perLocalExpert[e];
  return r;
}

void EpBuffer::dispatchReceive(const DispatchOutputs& out, const Shape& shape, cudaStream_t stream) {
  const char* op = "dispatch";
  impl_->checkShape(shape, op);
  MESHCOMM_REQUIRE(out.capacityRows >= 0, "rank ", impl_->rank_, ": ", op, ": output rows ",
                   out.capacityRows);
  if (out.capacityRows > 0) impl_->requirePointer(out.x, op, "recv_x");
  if (shape.scales > 0 && out.capacityRows > 0) impl_->requirePointer(out.scales, op, "recv_x's scales");
  impl_->requirePointer(out.rankPrefix, op, "rank_prefix_matrix");
  MESHCOMM_REQUIRE(impl_->receives_ < impl_->sends_, "rank ", impl_->rank_, ": ", op,
                   ": dispatchReceive without a dispatchSend before it");
  CudaDeviceGuard guard(impl_->comm_.cudaDevice());
  // Sends whose receive never ran (an error between the two calls) still count on the receive epoch, so that
  // this receive waits for its own send's records, not stale ones with the flag it would otherwise expect.
  const uint64_t skipped = impl_->sends_ - impl_->receives_ - 1;
  if (skipped > 0)
    kernels::launchSkipEpochs(impl_->view_.receiveEpoch, impl_->view_.receiveStarted, skipped,
                              impl_->view_.receiveBlocks, stream);
  impl_->receives_ = impl_->sends_;
  impl_->signalled_ = impl_->sends_;
  kernels::launchDispatchReceive(impl_->view_, out, shape, stream);
}

void EpBuffer::combine(const CombineInputs& in, const Shape& shape, const CombineOutputs& out,
                       cudaStream_t stream) {
  const char* op = "combine";
  impl_->checkError();
  impl_->checkShape(shape, op);
  MESHCOMM_REQUIRE(in.rows >= 0 && in.tokens >= 0, "rank ", impl_->rank_, ": ", op, ": ", in.rows, " rows, ",
                   in.tokens, " tokens");
  MESHCOMM_REQUIRE(in.tokens <= combineCapacity(shape), "rank ", impl_->rank_, ": ", op, ": ", in.tokens,
                   " tokens, the buffer's combine slabs hold ", combineCapacity(shape),
                   " (give the Buffer more bytes)");
  if (in.rows > 0) {
    impl_->requirePointer(in.y, op, "x");
    impl_->requirePointer(in.srcIdx, op, "handle's source indices");
  }
  impl_->requirePointer(in.rankPrefix, op, "handle's rank_prefix_matrix");
  if (in.tokens > 0) {
    impl_->requirePointer(in.tokenInRank, op, "handle's is_token_in_rank");
    impl_->requirePointer(out.x, op, "combined_x");
  }
  CudaDeviceGuard guard(impl_->comm_.cudaDevice());
  KernelView view = impl_->view_;
  if (view.net) {  // no allocation here: a host thread's cudaFree would stall the proxy's copies
    if (in.tokens > 0)
      impl_->requirePointer(in.tokenRowIndex, op, "the token row index scratch (across nodes)");
    kernels::launchTokenRowIndex(in.tokenInRank, in.tokens, impl_->size_, in.tokenRowIndex, stream);
    view.tokenRowIndex = in.tokenRowIndex;
  }
  kernels::launchCombine(view, in, shape, out, stream);
}

}  // namespace meshcomm::ep
