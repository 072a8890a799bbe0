// A killed rank is reported by its peer, on the host (bootstrap) and on the device (semaphore wait).
//
// How it runs. meshcomm-run stops every rank as soon as one fails, so the dying rank must not look like a
// failure to it, and no other test may run alongside (their collectives would wait on the dead rank):
//
//   MESHCOMM_TEST_EXPECT_KILL=1 meshcomm-run -n 2 -- meshcomm_gpu_tests --gtest_filter='Failure*'
//
// (scripts/gpu-check.sh does exactly this). In that mode:
//   * rank 1 sets up a semaphore with rank 0, exchanges one bootstrap message with it (so the bootstrap
//     path between them exists), prints that it dies and calls _exit(0): an abrupt death without any
//     cleanup (sockets are closed by the kernel, which is what a peer sees of a crashed or killed process),
//     with exit status 0 so that the launcher lets rank 0 finish;
//   * rank 0 waits for rank 1 on a bootstrap recv and, at the same time, on a device semaphore wait with a
//     3 s timeout. The recv must fail with an Error (RemoteError: peer closed, or Timeout) within the
//     bootstrap timeout (the harness sets MESHCOMM_BOOTSTRAP_TIMEOUT=15 in this mode unless set), the device
//     wait must time out and checkDeviceError() must throw Error(Timeout) naming rank 0 and peer 1. Then it
//     prints "MESHCOMM-FAILURE-TEST: killed peer reported" and the process exits without any closing
//     collective (runGpuTests skips them in this mode);
//   * other ranks (with -n > 2) do nothing.
// The script checks for exit status 0 *and* the marker line, so a skipped or vacuous run does not pass.
// Without MESHCOMM_TEST_EXPECT_KILL the test is skipped (it would kill rank 1 in the middle of the suite).
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "gpu_test_env.hpp"
#include "meshcomm/device.hpp"

namespace meshcomm::test {
namespace {

__global__ void waitForDeadPeerKernel(MemoryDevice2DeviceSemaphoreDeviceHandle sem, int* ok) {
  *ok = sem.wait() ? 1 : 0;
}

bool namesPeer(const std::string& what) {
  return what.find("peer 1") != std::string::npos || what.find("rank 1") != std::string::npos;
}

// Not a GpuTest: no barrier around it (a rank dies in the middle).
class FailureTest : public ::testing::Test {};

TEST_F(FailureTest, KilledPeerIsReportedOnHostAndDevice) {
  TestProcess& p = process();
  if (!p.expectKill) {
    GTEST_SKIP()
        << "kills rank 1; run it alone: " << kEnvExpectKill
        << "=1 meshcomm-run -n 2 -- meshcomm_gpu_tests --gtest_filter='Failure*' (scripts/gpu-check.sh)";
  }
  Communicator& comm = *p.comm;
  Bootstrap& boot = *p.bootstrap;
  ASSERT_GE(comm.size(), 2) << "the killed-peer test needs 2 ranks";
  const int rank = comm.rank();
  if (rank > 1) {
    std::printf("[rank %d] not part of the killed-peer test\n", rank);
    return;
  }
  const int peer = 1 - rank;
  constexpr int kTag = 1 << 20;  // this test runs alone: any fixed tag is free
  auto conn = comm.connect(peer, kTag);
  MemoryDevice2DeviceSemaphore sem(comm, conn, kTag + 1);
  int32_t hello = rank, heard = -1;
  boot.send(&hello, sizeof(hello), peer, kTag + 2);
  boot.recv(&heard, sizeof(heard), peer, kTag + 2);
  ASSERT_EQ(heard, peer);

  if (rank == 1) {
    std::printf("[rank 1] MESHCOMM-FAILURE-TEST: dying now with _exit(0) (no cleanup)\n");
    std::fflush(nullptr);
    ::_exit(0);
  }

  // Rank 0: wait for rank 1 on the device and on the host at the same time.
  constexpr uint64_t kDeviceTimeoutNs = 3ull * 1000 * 1000 * 1000;
  MemoryDevice2DeviceSemaphoreDeviceHandle h = sem.deviceHandle();
  h.spin.timeoutNs = kDeviceTimeoutNs;
  GpuBuffer ok(sizeof(int));
  CudaStream stream;
  waitForDeadPeerKernel<<<1, 1, 0, stream.get()>>>(h, static_cast<int*>(ok.data()));
  MESHCOMM_TEST_CHECK_LAUNCH();

  const double bootstrapTimeout = static_cast<double>(envInt("MESHCOMM_BOOTSTRAP_TIMEOUT"));
  const auto start = std::chrono::steady_clock::now();
  bool hostError = false;
  try {
    int32_t never = 0;
    boot.recv(&never, sizeof(never), 1, kTag + 3);
    ADD_FAILURE() << "bootstrap recv from the dead rank 1 returned data";
  } catch (const Error& e) {
    hostError = true;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("[rank 0] bootstrap recv from the dead peer failed after %.2f s: %s\n", seconds, e.what());
    EXPECT_TRUE(e.code() == ErrorCode::RemoteError || e.code() == ErrorCode::Timeout) << e.what();
    EXPECT_LE(seconds, bootstrapTimeout + 5.0) << "the dead peer was noticed too late";
    EXPECT_TRUE(namesPeer(e.what())) << "error does not name the dead peer: " << e.what();
  }
  EXPECT_TRUE(hostError);

  MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  int okHost = -1;
  MESHCOMM_CUDA_CHECK(cudaMemcpy(&okHost, ok.data(), sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(okHost, 0) << "the device wait for the dead peer returned success";
  bool deviceError = false;
  try {
    comm.checkDeviceError();
  } catch (const Error& e) {
    deviceError = true;
    std::printf("[rank 0] device wait for the dead peer reported: %s\n", e.what());
    EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
    EXPECT_TRUE(namesPeer(e.what())) << e.what();
  }
  EXPECT_TRUE(deviceError) << "checkDeviceError did not report the timed-out wait";
  comm.clearDeviceError();
  if (!HasFailure()) std::printf("[rank 0] MESHCOMM-FAILURE-TEST: killed peer reported\n");
  std::fflush(nullptr);
}

}  // namespace
}  // namespace meshcomm::test
