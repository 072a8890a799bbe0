// Window (include/meshcomm/window.hpp) across GPUs: every rank puts fresh random data into every rank's
// window (its own included) at its own slot, signals, waits for every rank's signal and checks its window
// byte for byte (payload slots + poison elsewhere); the same exchange captured once in a CUDA graph and
// replayed with new data (the signal counts advance on the device); a put that does not fit is refused.
#include <memory>
#include <string>
#include <vector>

#include "gpu_test_env.hpp"
#include "meshcomm/comm.hpp"
#include "meshcomm/window.hpp"

namespace meshcomm::test {
namespace {

class Windows : public GpuTest {
 protected:
  // Slot p of every rank's window receives rank p's `bytes`: puts, signals and waits on `s`.
  void exchange(Window& w, const std::vector<GpuBuffer>& sources, uint64_t slot, uint64_t bytes,
                cudaStream_t s) {
    for (int p = 0; p < worldSize(); ++p) {
      w.put(sources[p].data(), bytes, p, rank() * slot, s);
      w.signal(p, s);
    }
    for (int p = 0; p < worldSize(); ++p) w.waitSignal(p, s);
  }

  ExpectLayout expectation(uint64_t slot, uint64_t bytes, uint8_t poison, uint64_t iteration) const {
    ExpectLayout layout(slot * worldSize(), poison);
    for (int p = 0; p < worldSize(); ++p)
      layout.add(p * slot, bytes, dataSeed(testSeed(), p, rank(), iteration));
    return layout;
  }
};

TEST_F(Windows, EveryRankPutsIntoEveryWindowAndSignals) {
  Comm& c = adopt(freshComm());
  const int n = worldSize();
  const uint64_t slot = 1 << 20;
  GpuBuffer& windowMemory = keep<GpuBuffer>(slot * n);
  Window& w = keep<Window>(c, windowMemory.data(), windowMemory.size());
  for (int p = 0; p < n; ++p) {
    ASSERT_EQ(w.peerBytes(p), slot * n) << "peer " << p;
    ASSERT_NE(w.peerData(p), nullptr) << "peer " << p;
  }
  std::vector<GpuBuffer> sources;
  for (int p = 0; p < n; ++p) sources.emplace_back(slot);
  BufferChecker checker;
  CheckTally tally;
  Rng rng(testSeed() ^ rank());
  Rng shared(testSeed());  // the same sizes on every rank
  for (uint64_t it = 0; it < 12; ++it) {
    const uint64_t bytes = shared.size(slot);
    const uint8_t poison = static_cast<uint8_t>(rng.next());
    MESHCOMM_CUDA_CHECK(cudaMemsetAsync(windowMemory.data(), poison, windowMemory.size(), stream()));
    for (int p = 0; p < n; ++p)
      fillPattern(stream(), sources[p].data(), bytes, dataSeed(testSeed(), rank(), p, it));
    syncAndCheck();
    bootstrap().barrier();  // every window is poisoned before anyone puts
    exchange(w, sources, slot, bytes, stream());
    tally.record(checker.check(stream(), windowMemory.data(), expectation(slot, bytes, poison, it)),
                 "iteration " + std::to_string(it) + ", " + std::to_string(bytes) + " bytes");
    syncAndCheck();
    bootstrap().barrier();  // everyone has checked before the next poison
  }
  c.checkError();
  EXPECT_EQ(tally.failures(), 0u) << tally.summary();
}

TEST_F(Windows, CapturedExchangeReplaysWithNewData) {
  Comm& c = adopt(freshComm());
  const int n = worldSize();
  const uint64_t slot = 4096 + 12, bytes = 4096 + 7;
  GpuBuffer& windowMemory = keep<GpuBuffer>(slot * n);
  Window& w = keep<Window>(c, windowMemory.data(), windowMemory.size());
  std::vector<GpuBuffer> sources;
  for (int p = 0; p < n; ++p) sources.emplace_back(slot);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  MESHCOMM_CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
  exchange(w, sources, slot, bytes, stream());
  MESHCOMM_CUDA_CHECK(cudaStreamEndCapture(stream(), &graph));
  MESHCOMM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  BufferChecker checker;
  CheckTally tally;
  for (uint64_t it = 0; it < 4; ++it) {
    const uint8_t poison = static_cast<uint8_t>(0x31 + it);
    MESHCOMM_CUDA_CHECK(cudaMemsetAsync(windowMemory.data(), poison, windowMemory.size(), stream()));
    for (int p = 0; p < n; ++p)
      fillPattern(stream(), sources[p].data(), bytes, dataSeed(testSeed(), rank(), p, it));
    syncAndCheck();
    bootstrap().barrier();
    MESHCOMM_CUDA_CHECK(cudaGraphLaunch(exec, stream()));
    tally.record(checker.check(stream(), windowMemory.data(), expectation(slot, bytes, poison, it)),
                 "replay " + std::to_string(it));
    syncAndCheck();
    bootstrap().barrier();
  }
  MESHCOMM_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MESHCOMM_CUDA_CHECK(cudaGraphDestroy(graph));
  c.checkError();
  EXPECT_EQ(tally.failures(), 0u) << tally.summary();
}

TEST_F(Windows, APutThatDoesNotFitIsRefusedNamingThePeer) {
  Comm& c = adopt(freshComm());
  const uint64_t bytes = 1024;
  GpuBuffer& windowMemory = keep<GpuBuffer>(bytes);
  GpuBuffer& source = keep<GpuBuffer>(2 * bytes);
  Window& w = keep<Window>(c, windowMemory.data(), windowMemory.size());
  const int peer = (rank() + 1) % worldSize();
  try {
    w.put(source.data(), 16, peer, bytes - 8, stream());
    ADD_FAILURE() << "a put past the end of the window was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
    const std::string what = e.what();
    EXPECT_NE(what.find("do not fit peer " + std::to_string(peer) + "'s window of 1024 bytes"),
              std::string::npos)
        << what;
  }
  EXPECT_THROW(w.signal(worldSize(), stream()), Error);
  syncAndCheck();
}

}  // namespace
}  // namespace meshcomm::test
