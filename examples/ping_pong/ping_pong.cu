// meshcomm example: a ping-pong between two GPUs with a MemoryChannel.
//
//   meshcomm-run -n 2 -- build/examples/meshcomm-example-ping-pong
//
// Each rank drives one GPU. Rank 0 writes a message into rank 1's buffer (put), then signals; rank 1 waits,
// adds 1 to every word and writes the result back into rank 0's buffer, then signals; rank 0 waits and
// checks. Everything after the setup runs inside one kernel per rank, so the time per round trip is the
// GPU-to-GPU latency over NVLink.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "meshcomm/core.hpp"    // host API: bootstrap, communicator, registration, channels
#include "meshcomm/device.hpp"  // device API: MemoryChannelDeviceHandle::put / signal / wait

namespace {

constexpr int kWords = 1024;    // message: 1024 uint32 words = 4 KiB
constexpr int kRounds = 10000;  // round trips inside the kernel

// The buffer of each rank holds two messages: [inbox | outbox], kWords words each. The channel's `dst` is the
// peer's buffer, its `src` is ours, so put(dstOffset, srcOffset, ...) copies from our outbox into the
// peer's inbox.
__global__ void pingPong(meshcomm::MemoryChannelDeviceHandle ch, int isPinger, int rounds, int* errors) {
  auto* inbox = static_cast<uint32_t*>(ch.src);
  uint32_t* outbox = inbox + kWords;
  constexpr uint64_t kBytes = kWords * sizeof(uint32_t);
  for (int r = 0; r < rounds; ++r) {
    if (isPinger) {
      for (int i = threadIdx.x; i < kWords; i += blockDim.x) outbox[i] = r * kWords + i;
      __syncthreads();  // the whole message is written before it is copied
      ch.put(/*dstOffset=*/0, /*srcOffset=*/kBytes, kBytes, threadIdx.x, blockDim.x);
      __syncthreads();                    // every thread's stores are issued before the signal
      if (threadIdx.x == 0) ch.signal();  // release: the peer sees our data after its wait
      if (threadIdx.x == 0) ch.wait();    // acquire: the answer is visible to this thread ...
      __syncthreads();                    // ... and, through the barrier, to the whole block
      for (int i = threadIdx.x; i < kWords; i += blockDim.x)
        if (inbox[i] != static_cast<uint32_t>(r * kWords + i + 1)) atomicAdd(errors, 1);
      __syncthreads();  // done reading the inbox before the next round lets the peer overwrite it
    } else {
      if (threadIdx.x == 0) ch.wait();  // acquire: the ping has landed in our inbox
      __syncthreads();
      for (int i = threadIdx.x; i < kWords; i += blockDim.x) outbox[i] = inbox[i] + 1;
      __syncthreads();
      ch.put(0, kBytes, kBytes, threadIdx.x, blockDim.x);
      __syncthreads();
      if (threadIdx.x == 0) ch.signal();  // release: the pong is visible to the pinger after its wait
    }
  }
}

}  // namespace

int main() {
  using namespace meshcomm;
  try {
    // 1. Rank layout from the launcher (RANK, WORLD_SIZE, LOCAL_RANK, ...): one GPU per local rank.
    const RankEnv env = RankEnv::fromEnvironment();
    if (env.worldSize != 2) {
      if (env.rank == 0) std::printf("ping_pong: run with 2 ranks: meshcomm-run -n 2 -- <this binary>\n");
      return 1;
    }
    if (gpuCount() < env.localWorldSize) {
      std::printf("ping_pong: needs %d GPUs, found %d\n", env.localWorldSize, gpuCount());
      return 77;
    }
    MESHCOMM_CUDA_CHECK(cudaSetDevice(env.localRank));

    // 2. Bootstrap (host control plane) and communicator.
    auto bootstrap = TcpBootstrap::fromEnvironment();
    Communicator comm(bootstrap, env.localRank);
    const int rank = comm.rank(), peer = 1 - rank;

    // 3. A buffer the peer may write into: allocate, register, and exchange descriptions (pair calls: both
    //    ranks make them, with the same tag). recvMemory maps the peer's buffer into our address space.
    const size_t bytes = 2 * kWords * sizeof(uint32_t);
    GpuBuffer buffer(bytes);
    RegisteredMemory local = comm.registerMemory(buffer.data(), bytes);
    comm.sendMemory(local, peer, /*tag=*/0);
    RegisteredMemory remote = comm.recvMemory(peer, /*tag=*/0);

    // 4. A connection and a GPU-to-GPU semaphore, then the channel: dst = peer's buffer, src = ours.
    auto conn = comm.connect(peer, /*tag=*/1);
    auto semaphore = std::make_shared<MemoryDevice2DeviceSemaphore>(comm, conn, /*tag=*/2);
    MemoryChannel channel(semaphore, remote, local);

    // 5. Run: the device handle is a plain struct, passed to the kernel by value.
    int* errors = nullptr;
    MESHCOMM_CUDA_CHECK(cudaMalloc(&errors, sizeof(int)));
    MESHCOMM_CUDA_CHECK(cudaMemset(errors, 0, sizeof(int)));
    bootstrap->barrier();
    const auto start = std::chrono::steady_clock::now();
    pingPong<<<1, 256>>>(channel.deviceHandle(), rank == 0, kRounds, errors);
    MESHCOMM_CUDA_CHECK(cudaGetLastError());
    MESHCOMM_CUDA_CHECK(cudaDeviceSynchronize());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    comm.checkDeviceError();  // throws if a wait timed out (e.g. the peer died)

    // 6. Verify and report (rank 0 checked every answer).
    int hostErrors = 0;
    MESHCOMM_CUDA_CHECK(cudaMemcpy(&hostErrors, errors, sizeof(int), cudaMemcpyDeviceToHost));
    MESHCOMM_CUDA_CHECK(cudaFree(errors));
    if (rank == 0) {
      std::printf("ping_pong: %d round trips of %d bytes, %.2f us per round trip (%.2f us one-way), %s\n",
                  kRounds, static_cast<int>(kWords * sizeof(uint32_t)), seconds * 1e6 / kRounds,
                  seconds * 1e6 / kRounds / 2, hostErrors == 0 ? "all answers correct" : "WRONG ANSWERS");
    }
    // 7. Teardown: nobody unmaps or frees while the peer may still use the memory.
    bootstrap->barrier();
    return hostErrors == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ping_pong: %s\n", e.what());
    return 1;
  }
}
