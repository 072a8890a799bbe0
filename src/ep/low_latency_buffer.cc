// LowLatencyBuffer (include/meshcomm/ep/low_latency_buffer.hpp): the region, the device counters, argument
// checks, the ticket bookkeeping of split phases, and the launches of low_latency_kernels.cu.
#include "meshcomm/ep/low_latency_buffer.hpp"

#include "ep/low_latency_kernels.cuh"
#include "ep/peer_regions.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"

namespace meshcomm::ep {

namespace {

constexpr int kRegionTag = 0x3c00000 + 65;  // distinct from EpBuffer's

// Send/receive bookkeeping of one op. Sends issue tickets 1, 2, ...; call t uses the region half of its
// epoch's parity, which call t - 2 used before it, so a send is refused while call t - 2 still awaits its
// receive. Receives may come in either order, each once.
struct Tickets {
  uint64_t sent = 0;
  uint64_t awaiting[2] = {0, 0};  // by ticket parity: the ticket awaiting its receive, or 0

  uint64_t send(int rank, const char* op) {
    const uint64_t t = sent + 1;
    MESHCOMM_REQUIRE(awaiting[t % 2] == 0, "rank ", rank, ": ", op, ": call ", awaiting[t % 2],
                     " still awaits its receive (call its hook first): two earlier calls are outstanding and "
                     "the buffer holds two");
    awaiting[t % 2] = t;
    return sent = t;
  }
  void receive(int rank, const char* op, uint64_t ticket) {
    MESHCOMM_REQUIRE(ticket != 0 && awaiting[ticket % 2] == ticket, "rank ", rank, ": ", op, ": call ",
                     ticket, " has no receive pending (each hook runs once, after its send)");
    awaiting[ticket % 2] = 0;
  }
};

}  // namespace

class LowLatencyBuffer::Impl {
 public:
  Impl(Comm& comm, size_t bytes, int blocks)
      : comm_(comm), rank_(comm.rank()), size_(comm.size()), bytes_(bytes), blocks_(blocks) {
    CudaDeviceGuard guard(comm.cudaDevice());
    regions_ = std::make_unique<PeerRegions>(comm, bytes, blocks, kRegionTag, "LowLatencyBuffer");
    Communicator& c = comm.communicator();
    view_ = LowLatencyView{};
    regions_->fill(view_.regions, view_.spin);
    view_.rank = rank_;
    view_.size = size_;
    view_.dispatchEpoch = c.allocateCounter();
    view_.dispatchStarted = c.allocateCounter();
    view_.combineEpoch = c.allocateCounter();
    view_.combineStarted = c.allocateCounter();
    scratch_ = GpuBuffer(sizeof(uint64_t) * 9);  // pending[4], receivesDone[2][2], combineSendsDone; zeroed
    view_.pending = static_cast<uint64_t*>(scratch_.data());
    view_.receivesDone = view_.pending + 4;
    view_.combineSendsDone = view_.pending + 8;
  }

  LowLatencyView viewFor(const LowLatencyShape& s, const char* op, uint64_t ticket) const {
    MESHCOMM_REQUIRE(s.maxTokens > 0 && s.hidden > 0 && s.hidden % 128 == 0, "rank ", rank_, ": ", op,
                     ": num_max_dispatch_tokens_per_rank ", s.maxTokens, ", hidden ", s.hidden,
                     " (positive, hidden a multiple of 128)");
    MESHCOMM_REQUIRE(s.numExperts > 0 && s.numExperts % size_ == 0 && s.numExperts <= kMaxExperts, "rank ",
                     rank_, ": ", op, ": ", s.numExperts, " experts; a multiple of the ", size_,
                     " ranks, at most ", kMaxExperts);
    MESHCOMM_REQUIRE(s.topk >= 1 && s.topk <= 32, "rank ", rank_, ": ", op, ": top-", s.topk, " (1 to 32)");
    const size_t need = LowLatencyBuffer::bytesFor(s.maxTokens, s.hidden, size_, s.numExperts);
    MESHCOMM_REQUIRE(need <= bytes_, "rank ", rank_, ": ", op, ": ", s.maxTokens, " tokens of ", s.hidden,
                     " for ", s.numExperts, " experts need ", need, " bytes, the buffer has ", bytes_,
                     " (num_rdma_bytes: size it with get_low_latency_rdma_size_hint)");
    LowLatencyView v = view_;
    v.layout = LowLatencyLayout::of(s.maxTokens, s.hidden, s.numExperts);
    v.slot = static_cast<uint32_t>(ticket % 2);
    return v;
  }

  // Launches the send and/or receive phase of one op; returns the call's ticket.
  template <typename Launch>
  uint64_t run(Tickets& tickets, const LowLatencyShape& s, const char* op, int phases, uint64_t ticket,
               Launch&& launch) {
    MESHCOMM_REQUIRE(phases >= kLowLatencySend && phases <= kLowLatencyBoth, "rank ", rank_, ": ", op,
                     ": phases ", phases, " (send 1, receive 2, both 3)");
    CudaDeviceGuard guard(comm_.cudaDevice());
    LowLatencyView v;
    if (phases & kLowLatencySend) {
      v = viewFor(s, op, tickets.sent + 1);  // checks the shape before taking a ticket
      ticket = tickets.send(rank_, op);
    }
    if (phases & kLowLatencyReceive) {
      v = viewFor(s, op, ticket);
      tickets.receive(rank_, op, ticket);
    }
    launch(v, phases);  // both phases in one launch: blocks that finish sending start receiving
    return ticket;
  }

  Comm& comm_;
  const int rank_, size_;
  const size_t bytes_;
  const int blocks_;
  std::unique_ptr<PeerRegions> regions_;
  GpuBuffer scratch_, combineSource_;
  LowLatencyView view_{};
  Tickets dispatches_, combines_;
};

LowLatencyBuffer::LowLatencyBuffer(Comm& comm, size_t bytes, int blocks)
    : impl_(std::make_unique<Impl>(comm, bytes, blocks)) {}

LowLatencyBuffer::~LowLatencyBuffer() {
  // Every peer must be done with this region before it goes: drain this GPU, then agree.
  try {
    CudaDeviceGuard guard(impl_->comm_.cudaDevice());
    (void)cudaDeviceSynchronize();
    impl_->comm_.communicator().bootstrap().barrier();
  } catch (const std::exception&) {  // a peer already gone: nothing of ours is read any more
  }
}

size_t LowLatencyBuffer::bytesFor(int maxTokens, int hidden, int /*ranks*/, int numExperts) {
  return static_cast<size_t>(LowLatencyLayout::of(maxTokens, hidden, numExperts).total);
}

uint64_t LowLatencyBuffer::dispatch(const LowLatencyDispatchArgs& a, const LowLatencyShape& s, int phases,
                                    uint64_t ticket, cudaStream_t stream) {
  const char* op = "low_latency_dispatch";
  Impl& m = *impl_;
  m.comm_
      .checkError();  // a failure of an earlier call (a bad expert index, a peer that never came) raises here
  MESHCOMM_REQUIRE(a.tokens >= 0 && a.tokens <= s.maxTokens, "rank ", m.rank_, ": ", op, ": ", a.tokens,
                   " tokens, num_max_dispatch_tokens_per_rank is ", s.maxTokens);
  MESHCOMM_REQUIRE(!a.ue8m0 || (a.fp8 && a.roundScale && s.hidden % 512 == 0), "rank ", m.rank_, ": ", op,
                   ": use_ue8m0 needs use_fp8, round_scale and hidden a multiple of 512");
  MESHCOMM_REQUIRE(a.tokens == 0 || (a.x && a.topkIdx), "rank ", m.rank_, ": ", op,
                   ": x or topk_idx is null");
  MESHCOMM_REQUIRE(a.recvX && a.recvCount && a.srcInfo && a.layoutRange && (!a.fp8 || a.recvScales), "rank ",
                   m.rank_, ": ", op, ": an output is null");
  return m.run(m.dispatches_, s, op, phases, ticket, [&](const LowLatencyView& v, int phase) {
    ll::launchDispatch(v, a, s, phase, m.blocks_, stream);
  });
}

uint64_t LowLatencyBuffer::combine(const LowLatencyCombineArgs& a, const LowLatencyShape& s, int phases,
                                   uint64_t ticket, cudaStream_t stream) {
  const char* op = "low_latency_combine";
  Impl& m = *impl_;
  m.comm_.checkError();
  MESHCOMM_REQUIRE(a.tokens >= 0 && a.tokens <= s.maxTokens, "rank ", m.rank_, ": ", op, ": ", a.tokens,
                   " tokens, num_max_dispatch_tokens_per_rank is ", s.maxTokens);
  MESHCOMM_REQUIRE(a.srcInfo && a.layoutRange && (a.tokens == 0 || (a.topkIdx && a.topkWeights && a.out)),
                   "rank ", m.rank_, ": ", op, ": an argument is null");
  LowLatencyCombineArgs args = a;
  if (!args.y) {
    MESHCOMM_REQUIRE(m.combineSource_.size() > 0, "rank ", m.rank_, ": ", op,
                     ": zero_copy without get_next_low_latency_combine_buffer");
    args.y = m.combineSource_.data();
  }
  return m.run(m.combines_, s, op, phases, ticket, [&](const LowLatencyView& v, int phase) {
    ll::launchCombine(v, args, s, phase, m.blocks_, stream);
  });
}

void* LowLatencyBuffer::combineSource(const LowLatencyShape& s) {
  Impl& m = *impl_;
  const size_t need = static_cast<size_t>(s.numExperts / m.size_) * m.size_ * s.maxTokens * 2ull * s.hidden;
  if (m.combineSource_.size() < need) {
    CudaDeviceGuard guard(m.comm_.cudaDevice());
    m.combineSource_ = GpuBuffer(need);
  }
  return m.combineSource_.data();
}

}  // namespace meshcomm::ep
