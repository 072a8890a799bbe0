// A user-written allreduce, built at run time by meshcomm.compile_native (examples/torch/native_algorithm.py,
// docs/native.md): only meshcomm's installed headers and libmeshcomm, nothing from meshcomm's sources.
//
// One shot through the Comm's scratch buffers, block b on channel b of every peer:
//   1. block b copies its slice of this rank's input into this rank's scratch (premulsum: prescaled, so every
//      rank reduces the same values);
//   2. barrier with every peer on channel b: release/acquire, so the peers' slices b are visible;
//   3. block b reduces slice b of every rank's scratch, in rank order (bit-identical on every rank), into the
//      output (in place works: a block reads its input slice only in step 1);
//   4. barrier again on channel b: no peer still reads this rank's scratch when a later call writes it.
// Every (peer, channel) gets two signals and two waits per call on every rank (the epoch invariant), since
// all ranks launch the same block count (it depends only on the call and the topology).
#include <meshcomm/comm_resources.hpp>
#include <meshcomm/device/comm_device.hpp>
#include <meshcomm/device/reduce.hpp>
#include <meshcomm/errors.hpp>
#include <meshcomm/native_algorithm.hpp>

#include <algorithm>
#include <string>

namespace {

using namespace meshcomm;

constexpr int kThreads = 512;
constexpr size_t kBytesPerBlock = 64 * 1024;

bool supportedType(DataType t) {
  return t == DataType::F32 || t == DataType::F16 || t == DataType::BF16;
}

template <DataType D, ReduceOp Op>
__global__ void __launch_bounds__(kThreads)
    oneShotAllReduce(CommDeviceView v, const void* input, void* output, size_t count, ReduceParams params) {
  using R = device::Reducer<D, Op>;
  using Raw = typename R::Raw;
  const R reducer(params);
  const size_t perBlock = (count + gridDim.x - 1) / gridDim.x;
  const size_t lo = std::min(count, perBlock * blockIdx.x), hi = std::min(count, lo + perBlock);

  Raw* mine = static_cast<Raw*>(v.peerScratch[v.rank]);
  const Raw* in = static_cast<const Raw*>(input);
  for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) mine[i] = reducer.prescale(in[i]);
  if (!device::barrierAllPeers(v, blockIdx.x)) return;  // a timeout is recorded for Comm.check_error

  Raw* out = static_cast<Raw*>(output);
  for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    typename R::Acc acc = R::firstPrescaled(static_cast<const Raw*>(v.peerScratch[0])[i]);
    for (int r = 1; r < v.nRanks; ++r)
      R::accumulatePrescaled(acc, static_cast<const Raw*>(v.peerScratch[r])[i]);
    out[i] = reducer.finish(acc);
  }
  device::barrierAllPeers(v, blockIdx.x);
}

class NativeOneShotAllReduce : public Algorithm {
 public:
  std::string name() const override { return "native_oneshot_allreduce"; }  // the loaded name replaces it
  Collective collective() const override { return Collective::AllReduce; }
  void initialize(CommResources& resources) override { resources_ = &resources; }

  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    if (resources_ == nullptr) return "not initialized";
    if (!topo.allPeersIpc) return "needs every peer reachable by CUDA IPC";
    if (!supportedType(args.dtype))
      return std::string("dtype ") + dataTypeName(args.dtype) + " (f32, f16, bf16 only)";
    const CommDeviceView& v = resources_->view();
    if (topo.nRanks > 1 && v.channelsPerPeer < 1) return "needs at least one channel per peer";
    if (args.count * dataTypeSize(args.dtype) > v.scratchBytes)
      return "message larger than the scratch buffer (MESHCOMM_SCRATCH_BYTES)";
    return {};
  }

  LaunchConfig defaultConfig(const CollectiveArgs& args, const CommTopology& topo) const override {
    const size_t bytes = args.count * dataTypeSize(args.dtype);
    const size_t wanted = (bytes + kBytesPerBlock - 1) / kBytesPerBlock;
    const int channels = std::max(1, resources_->view().channelsPerPeer);
    return {static_cast<int>(std::clamp<size_t>(wanted, 1, channels)), kThreads};
  }

  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    const CommDeviceView& v = resources.view();
    const int blocks = config.nBlocks, threads = config.nThreadsPerBlock;
    MESHCOMM_REQUIRE(blocks >= 1 && (v.nRanks == 1 || blocks <= v.channelsPerPeer), "rank ", v.rank,
                     ": allreduce: nblocks: ", blocks, " (this algorithm runs 1..", v.channelsPerPeer,
                     " blocks, one channel each)");
    MESHCOMM_REQUIRE(threads >= std::max(32, v.nRanks - 1) && threads <= kThreads && threads % 32 == 0,
                     "rank ", v.rank, ": allreduce: nthreads_per_block: ", threads,
                     " (a multiple of 32 from ", std::max(32, v.nRanks - 1), " to ", kThreads, ")");
    const ReduceParams params = makeReduceParams(args.op, v.nRanks);
    const bool known = dispatchReduction(args.dtype, args.op.op, [&](auto tag) {
      using Tag = decltype(tag);
      if constexpr (Tag::kType == DataType::F32 || Tag::kType == DataType::F16 ||
                    Tag::kType == DataType::BF16) {
        oneShotAllReduce<Tag::kType, Tag::kOp>
            <<<blocks, threads, 0, args.stream>>>(v, args.input, args.output, args.count, params);
      }
    });
    MESHCOMM_REQUIRE(known && supportedType(args.dtype), "rank ", v.rank,
                     ": allreduce: dtype/op not supported");
    MESHCOMM_CUDA_CHECK(cudaGetLastError());
  }

 private:
  const CommResources* resources_ = nullptr;
};

}  // namespace

MESHCOMM_EXPORT_NATIVE_ALGORITHM(NativeOneShotAllReduce)
