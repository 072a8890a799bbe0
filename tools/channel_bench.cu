// meshcomm-channel-bench: point-to-point bandwidth and latency of meshcomm channels between two GPUs, next
// to the copy engine (CE) baseline. One process per GPU:
//
//   meshcomm-run -n 2 -- meshcomm-channel-bench [--max-bytes 256M] [--min-bytes 1M] [--iters 30]
//                                               [--warmup 5] [--json FILE]
//
// Ranks 0 and 1 measure; ranks >= 2 only join the bootstrap and its closing barrier. Without two GPUs (or
// two ranks) it prints why and exits 77.
//
// Definitions (every row: warm-up, then --iters timed iterations, median):
// * One iteration = a GPU-to-GPU barrier kernel on both ranks (signal + wait on a dedicated semaphore, so
//   both GPUs start within about a microsecond), a start event, the operation, an end event; all
//   iterations are enqueued back to back without host synchronisation.
// * time = end - start on the sending rank, and the operation only ends once the data is complete at the
//   destination: CE - the copy's completion on the stream; MemoryChannel one-way - every block puts its
//   slice and signals its own channel, the receiver waits for all channels and signals back an ack that
//   block 0 of the sender waits for; PortChannel - the chunks, the last with a signal, then a flush (the
//   proxy reports completion of the copies). Bidirectional: both ranks send at once, each also waits for
//   the peer's data; time = max over the two ranks of that iteration.
// * GB/s = bytes / time / 1e9 (bytes in one direction; bidirectional rows count both: 2 * bytes).
// * CE baseline: cudaMemcpyAsync from local memory into the peer's buffer mapped here by CUDA IPC, i.e. the
//   copy-engine path of cudaMemcpyPeerAsync (and of PortChannel's CUDA IPC connection) between processes.
// * Peer baseline (rows ce_peer_*): a literal cudaMemcpyPeerAsync between rank 0's and rank 1's devices,
//   both driven from rank 0's process (rank 1 waits meanwhile); bidirectional = one stream per device
//   copying towards the other at once. Ratios (vs_CE, TARGET) use the faster of the two baselines.
// * Latency rows: ping-pong inside one kernel (10^4 round trips for MemoryChannel semaphores, 10^3 for
//   PortChannel and LL16 packets); time = round trip / 2 (one-way latency).
// * Before each row's timing, one untimed iteration runs on poisoned destinations and the receivers count
//   wrong words (column "check").
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshcomm/core.hpp"
#include "byte_size.hpp"
#include "run_record.hpp"
#include "tool_rank.hpp"
#include "meshcomm/device.hpp"

using namespace meshcomm;

namespace {

constexpr int kMaxThreads = 1024;

// ---------------------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------------------

struct Options {
  std::string command;  // the command line, for the JSON record
  uint64_t maxBytes = 256ull << 20;
  uint64_t minBytes = 1ull << 20;
  int iters = 30;
  int warmup = 5;
  std::string json;
};

uint64_t parseBytes(const std::string& s) {
  return tools::parseByteSize("meshcomm-channel-bench", s);
}

void usage() {
  std::printf(
      "usage: meshcomm-run -n 2 -- meshcomm-channel-bench [--max-bytes 256M] [--min-bytes 1M] [--iters 30]\n"
      "                                                   [--warmup 5] [--json FILE]\n");
}

Options parseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        MESHCOMM_THROW(ErrorCode::InvalidUsage, "meshcomm-channel-bench: ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--max-bytes")
      o.maxBytes = parseBytes(value());
    else if (a == "--min-bytes")
      o.minBytes = parseBytes(value());
    else if (a == "--iters")
      o.iters = std::atoi(value().c_str());
    else if (a == "--warmup")
      o.warmup = std::atoi(value().c_str());
    else if (a == "--json")
      o.json = value();
    else if (a == "-h" || a == "--help") {
      usage();
      std::exit(0);
    } else {
      usage();
      MESHCOMM_THROW(ErrorCode::InvalidUsage, "meshcomm-channel-bench: unknown argument '", a, "'");
    }
  }
  if (o.iters < 1 || o.warmup < 0)
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "--iters must be >= 1, --warmup >= 0");
  o.maxBytes = std::max<uint64_t>(o.maxBytes / 16 * 16, 16);
  o.minBytes = std::min(std::max<uint64_t>(o.minBytes / 16 * 16, 16), o.maxBytes);
  return o;
}

// ---------------------------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------------------------

__host__ __device__ inline uint32_t patternWord(uint64_t seed, uint64_t k) {
  uint64_t x = seed + k * 0xD1B54A32D192ED03ull + 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>((x ^ (x >> 31)) >> 32) | 1u;
}

__device__ __forceinline__ uint64_t umin64(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}

__global__ void fillKernel(uint32_t* p, uint64_t words, uint64_t seed) {
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k < words;
       k += static_cast<uint64_t>(gridDim.x) * blockDim.x)
    p[k] = patternWord(seed, k);
}

__global__ void countWrongKernel(const uint32_t* p, uint64_t words, uint64_t seed,
                                 unsigned long long* wrong) {
  unsigned long long bad = 0;
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k < words;
       k += static_cast<uint64_t>(gridDim.x) * blockDim.x)
    bad += p[k] != patternWord(seed, k);
  if (bad != 0) atomicAdd(wrong, bad);  // a counter only; the host reads it after the kernel
}

// GPU-to-GPU barrier: release orders this rank's earlier stream work (e.g. poisoning a destination) before
// the peer's later writes; acquire makes the peer's earlier work visible here.
__global__ void barrierKernel(MemoryDevice2DeviceSemaphoreDeviceHandle sem) {
  sem.signal();
  sem.wait();
}

// MemoryChannel put of [0, bytes): block b copies slice b through channel b and signals it. receive: also
// wait for the peer's slice b (bidirectional). waitAck: block 0 waits for the receiver's ack (one-way).
template <int Unroll>
__global__ void __launch_bounds__(kMaxThreads)
    memPutKernel(const MemoryChannelDeviceHandle* chans, uint64_t bytes, int receive,
                 MemoryDevice2DeviceSemaphoreDeviceHandle ack, int waitAck) {
  const uint64_t per = ((bytes + gridDim.x - 1) / gridDim.x + 15) / 16 * 16;
  const uint64_t off = umin64(bytes, blockIdx.x * per);
  const uint64_t len = umin64(per, bytes - off);
  const MemoryChannelDeviceHandle& c = chans[blockIdx.x];
  device::copy<Unroll>(static_cast<char*>(c.dst) + off, static_cast<const char*>(c.src) + off, len,
                       threadIdx.x, blockDim.x);
  __syncthreads();  // every thread's stores precede the release in signal()
  if (threadIdx.x == 0) {
    MemoryChannelDeviceHandle ch = c;
    ch.signal();             // release: slice b is visible to the peer after its wait on channel b
    if (receive) ch.wait();  // acquire: the peer's slice b has landed here
    if (waitAck && blockIdx.x == 0) ack.wait();  // acquire: the receiver has seen every slice
  }
}

// One-way receiver: thread t waits for channel t (t < nChannels), then one ack after all of them.
__global__ void memRecvKernel(const MemoryChannelDeviceHandle* chans, int nChannels,
                              MemoryDevice2DeviceSemaphoreDeviceHandle ack) {
  for (int b = threadIdx.x; b < nChannels; b += blockDim.x) {
    MemoryChannelDeviceHandle ch = chans[b];
    ch.wait();  // acquire: slice b has landed
  }
  __syncthreads();  // all waits are done before the ack's release
  if (threadIdx.x == 0) ack.signal();
}

// PortChannel put of [0, bytes) in chunks, the last with the signal, then flush (completion at the peer).
__global__ void portPutKernel(PortChannelDeviceHandle ch, uint64_t bytes, uint64_t chunk, int send,
                              int receive) {
  if (send) {
    for (uint64_t off = 0; off < bytes; off += chunk) {
      const uint64_t n = umin64(chunk, bytes - off);
      if (off + n < bytes)
        ch.put(off, off, n);
      else
        ch.putWithSignal(off, off, n);
    }
    ch.flush();
  }
  if (receive) ch.wait();  // acquire: the peer's data has landed here
}

__global__ void memPingPongKernel(MemoryDevice2DeviceSemaphoreDeviceHandle sem, int iters, int initiator) {
  for (int i = 0; i < iters; ++i) {
    if (initiator) {
      sem.signal();
      if (!sem.wait()) return;
    } else {
      if (!sem.wait()) return;
      sem.signal();
    }
  }
}

__global__ void portPingPongKernel(PortChannelDeviceHandle ch, int iters, int initiator) {
  for (int i = 0; i < iters; ++i) {
    if (initiator) {
      ch.signal();
      if (!ch.wait()) return;
    } else {
      if (!ch.wait()) return;
      ch.signal();
    }
  }
}

// LL16 ping-pong of `bytes`: the initiator sends src[0, bytes) as packets and unpacks the echo into
// src+outOffset; the responder unpacks into src+outOffset, then echoes that. Flags flagBase, flagBase+1, ...
// (never reused). No extra synchronisation: a rank writes round i+1's packets into a slot only after
// reading the peer's round-i packets, which the peer wrote after reading all of round i (__syncthreads).
__global__ void llPingPongKernel(MemoryChannelDeviceHandle ch, uint64_t bytes, int iters, uint32_t flagBase,
                                 int initiator, uint64_t outOffset) {
  for (int i = 0; i < iters; ++i) {
    const uint32_t flag = flagBase + static_cast<uint32_t>(i);
    if (initiator) {
      ch.putPackets<LL16Packet>(0, 0, bytes, flag, threadIdx.x, blockDim.x);
      if (!ch.unpackPackets<LL16Packet>(outOffset, 0, bytes, flag, threadIdx.x, blockDim.x)) return;
    } else {
      if (!ch.unpackPackets<LL16Packet>(outOffset, 0, bytes, flag, threadIdx.x, blockDim.x)) return;
      __syncthreads();  // the whole ping is read (and unpacked) before any of the echo is written
      ch.putPackets<LL16Packet>(0, outOffset, bytes, flag, threadIdx.x, blockDim.x);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// The benchmark
// ---------------------------------------------------------------------------------------------------------

struct Row {
  std::string test;
  uint64_t bytes;
  double timeUs;
  double gbps;   // NaN: not a bandwidth row
  double ratio;  // vs the CE row of the same direction and size; NaN: none
  std::string check;
};

struct MemConfig {
  int blocks, threads, unroll;
  std::string name() const { return detail::concat("b", blocks, ",t", threads, ",u", unroll); }
};

std::string sizeName(uint64_t b) {
  if (b % (1ull << 30) == 0) return detail::concat(b >> 30, "G");
  if (b % (1ull << 20) == 0) return detail::concat(b >> 20, "M");
  if (b % (1ull << 10) == 0) return detail::concat(b >> 10, "K");
  return detail::concat(b);
}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

class Bench {
 public:
  Bench(Communicator& comm, const Options& opts);
  ~Bench();
  void run();

 private:
  enum class Dir { OneWay, Bidir };
  using Work = std::function<void(cudaStream_t)>;

  bool sender(Dir d) const { return d == Dir::Bidir || rank_ == 0; }
  bool receiver(Dir d) const { return d == Dir::Bidir || rank_ == 1; }
  static const char* dirName(Dir d) { return d == Dir::OneWay ? "oneway" : "bidir"; }

  // Pairwise host exchanges between ranks 0 and 1 (same order on both).
  template <typename T>
  T swap(const T& mine) {
    T theirs{};
    boot_.send(&mine, sizeof(T), peer_, kTagHost);
    boot_.recv(&theirs, sizeof(T), peer_, kTagHost);
    return theirs;
  }
  std::vector<float> swapVector(const std::vector<float>& mine);

  std::vector<float> timeLoop(int warmup, int iters, const Work& work);
  // Poisons the receivers' destination, runs one iteration, counts wrong words on the receivers (both ranks
  // get the total).
  uint64_t verify(Dir d, uint64_t bytes, const Work& work, uint64_t dstOffset = 0);
  // Verifies, times and records one bandwidth row; returns its GB/s (on rank 0; rank 1 returns 0).
  double bandwidthRow(const std::string& name, Dir d, uint64_t bytes, const Work& work, double ceGbps);
  void latencyRow(const std::string& name, uint64_t bytes, double roundTrips, const Work& work,
                  const std::string& check);

  Work ceWork(Dir d, uint64_t bytes);
  // Rank 0 only: median microseconds of cudaMemcpyPeerAsync towards rank 1's device (rank 1 waits).
  double peerCopyMicros(Dir d, uint64_t bytes);
  double peerCopyRow(Dir d, uint64_t bytes);
  Work memWork(Dir d, uint64_t bytes, const MemConfig& c);
  Work portWork(Dir d, uint64_t bytes, uint64_t chunk);
  int residentBlocks(const MemConfig& c) const;

  void print() const;
  void writeJson(const std::string& path) const;

  static constexpr int kTagHost = 1;
  Communicator& comm_;
  Bootstrap& boot_;
  Options opts_;
  int rank_, peer_, sms_;
  cudaDeviceProp prop_{};
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> start_, stop_;

  GpuBuffer src_, dst_, packets_, llLocal_;
  RegisteredMemory srcMem_, dstMem_, packetsMem_, llLocalMem_, remoteDst_, remotePackets_;
  std::shared_ptr<Connection> conn_, proxyConn_;
  std::shared_ptr<MemoryDevice2DeviceSemaphore> syncSem_, ackSem_, latSem_, llSem_;
  std::vector<std::shared_ptr<MemoryDevice2DeviceSemaphore>> chanSems_;
  std::vector<MemoryChannel> chans_;
  GpuBuffer chanHandles_;
  MemoryChannel llChan_;
  std::unique_ptr<ProxyService> proxy_;
  PortChannelDeviceHandle port_{};
  GpuBuffer wrong_;
  // Rank 0's cudaMemcpyPeerAsync baseline: buffers and a stream on the peer's device.
  int peerDevice_ = -1;
  GpuBuffer peerDst_, peerSrc_, localDstForPeer_;
  cudaStream_t peerStream_ = nullptr;
  uint32_t llFlag_ = 1;  // LL flags start at 1 and only grow

  std::vector<Row> rows_;
  std::vector<std::string> targets_;
};

Bench::Bench(Communicator& comm, const Options& opts)
    : comm_(comm), boot_(comm.bootstrap()), opts_(opts), rank_(comm.rank()), peer_(1 - comm.rank()) {
  MESHCOMM_CUDA_CHECK(cudaGetDeviceProperties(&prop_, comm.cudaDevice()));
  sms_ = prop_.multiProcessorCount;
  MESHCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  const uint64_t maxBytes = opts_.maxBytes;
  constexpr uint64_t kLLMax = 64 << 10;

  src_ = GpuBuffer(maxBytes);
  dst_ = GpuBuffer(maxBytes);
  packets_ = GpuBuffer(device::packetBufferBytes<LL16Packet>(kLLMax));
  llLocal_ = GpuBuffer(2 * kLLMax);
  wrong_ = GpuBuffer(sizeof(unsigned long long));
  fillKernel<<<4 * sms_, 512, 0, stream_>>>(static_cast<uint32_t*>(src_.data()), maxBytes / 4,
                                            0x5EED0 + rank_);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
  fillKernel<<<64, 512, 0, stream_>>>(static_cast<uint32_t*>(llLocal_.data()), kLLMax / 4, 0x5EED0 + rank_);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
  MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream_));

  // Pairwise setup with the peer; both ranks make the same calls in the same order.
  peerDevice_ = swap<int>(comm_.cudaDevice());
  srcMem_ = comm_.registerMemory(src_.data(), maxBytes);
  dstMem_ = comm_.registerMemory(dst_.data(), maxBytes);
  packetsMem_ = comm_.registerMemory(packets_.data(), packets_.size());
  llLocalMem_ = comm_.registerMemory(llLocal_.data(), llLocal_.size());
  conn_ = comm_.connect(peer_, 10);
  proxyConn_ = comm_.connect(peer_, 11);
  comm_.sendMemory(dstMem_, peer_, 12);
  comm_.sendMemory(packetsMem_, peer_, 13);
  remoteDst_ = comm_.recvMemory(peer_, 12);
  remotePackets_ = comm_.recvMemory(peer_, 13);
  if (!remoteDst_.isMapped())
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", rank_,
                   ": the peer's buffer is not mapped (CUDA IPC needed)");
  syncSem_ = std::make_shared<MemoryDevice2DeviceSemaphore>(comm_, conn_, 14);
  ackSem_ = std::make_shared<MemoryDevice2DeviceSemaphore>(comm_, conn_, 15);
  latSem_ = std::make_shared<MemoryDevice2DeviceSemaphore>(comm_, conn_, 16);
  llSem_ = std::make_shared<MemoryDevice2DeviceSemaphore>(comm_, conn_, 17);
  llChan_ = MemoryChannel(llSem_, remotePackets_, llLocalMem_, packetsMem_);

  // One channel (own semaphore) per block of the largest MemoryChannel configuration.
  const int nChannels = std::min(4 * sms_, kMaxThreads);
  std::vector<MemoryChannelDeviceHandle> handles;
  for (int c = 0; c < nChannels; ++c) {
    chanSems_.push_back(std::make_shared<MemoryDevice2DeviceSemaphore>(comm_, conn_, 100 + c));
    chans_.emplace_back(chanSems_.back(), remoteDst_, srcMem_);
    handles.push_back(chans_.back().deviceHandle());
  }
  chanHandles_ = GpuBuffer(handles.size() * sizeof(MemoryChannelDeviceHandle));
  copyToDevice(chanHandles_.data(), handles.data(), chanHandles_.size());

  proxy_ = std::make_unique<ProxyService>(comm_);
  const SemaphoreId sem = proxy_->buildAndAddSemaphore(proxyConn_, 18);
  const MemoryId dstId = proxy_->addMemory(remoteDst_);
  const MemoryId srcId = proxy_->addMemory(srcMem_);
  port_ = proxy_->portChannel(sem, dstId, srcId).deviceHandle();
  proxy_->startProxy();
}

Bench::~Bench() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  try {
    boot_.send(&rank_, sizeof(rank_), peer_, kTagHost);  // neither rank unmaps while the other still copies
    int other = 0;
    boot_.recv(&other, sizeof(other), peer_, kTagHost);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] teardown: %s\n", rank_, e.what());
  }
  if (proxy_) proxy_->stopProxy();
  for (auto e : start_) cudaEventDestroy(e);
  for (auto e : stop_) cudaEventDestroy(e);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (peerStream_ != nullptr) cudaStreamDestroy(peerStream_);
}

std::vector<float> Bench::swapVector(const std::vector<float>& mine) {
  std::vector<float> theirs(mine.size());
  boot_.send(mine.data(), mine.size() * sizeof(float), peer_, kTagHost);
  boot_.recv(theirs.data(), theirs.size() * sizeof(float), peer_, kTagHost);
  return theirs;
}

std::vector<float> Bench::timeLoop(int warmup, int iters, const Work& work) {
  while (static_cast<int>(start_.size()) < iters) {
    cudaEvent_t a, b;
    MESHCOMM_CUDA_CHECK(cudaEventCreate(&a));
    MESHCOMM_CUDA_CHECK(cudaEventCreate(&b));
    start_.push_back(a);
    stop_.push_back(b);
  }
  const auto syncHandle = syncSem_->deviceHandle();
  for (int i = 0; i < warmup + iters; ++i) {
    barrierKernel<<<1, 1, 0, stream_>>>(syncHandle);
    MESHCOMM_CUDA_CHECK(cudaGetLastError());
    if (i >= warmup) MESHCOMM_CUDA_CHECK(cudaEventRecord(start_[i - warmup], stream_));
    work(stream_);
    if (i >= warmup) MESHCOMM_CUDA_CHECK(cudaEventRecord(stop_[i - warmup], stream_));
  }
  MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  comm_.checkDeviceError();
  proxy_->checkError();
  std::vector<float> us(iters);
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    MESHCOMM_CUDA_CHECK(cudaEventElapsedTime(&ms, start_[i], stop_[i]));
    us[i] = ms * 1000.0f;
  }
  return us;
}

uint64_t Bench::verify(Dir d, uint64_t bytes, const Work& work, uint64_t dstOffset) {
  if (receiver(d))
    MESHCOMM_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(dst_.data()) + dstOffset, 0, bytes, stream_));
  timeLoop(0, 1, work);
  swap<int>(0);  // both streams are drained: the sender's copy (e.g. a CE memcpy) has completed
  unsigned long long wrong = 0;
  if (receiver(d)) {
    MESHCOMM_CUDA_CHECK(cudaMemsetAsync(wrong_.data(), 0, sizeof(unsigned long long), stream_));
    countWrongKernel<<<4 * sms_, 512, 0, stream_>>>(
        reinterpret_cast<const uint32_t*>(static_cast<const char*>(dst_.data()) + dstOffset), bytes / 4,
        0x5EED0 + peer_, static_cast<unsigned long long*>(wrong_.data()));
    MESHCOMM_CUDA_CHECK(cudaGetLastError());
    MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    MESHCOMM_CUDA_CHECK(cudaMemcpy(&wrong, wrong_.data(), sizeof(wrong), cudaMemcpyDeviceToHost));
  }
  return wrong + swap<unsigned long long>(wrong);
}

double Bench::bandwidthRow(const std::string& name, Dir d, uint64_t bytes, const Work& work, double ceGbps) {
  const uint64_t wrong = verify(d, bytes, work);
  std::vector<float> us = timeLoop(opts_.warmup, opts_.iters, work);
  std::vector<float> theirs = swapVector(us);
  if (d == Dir::Bidir)
    for (size_t i = 0; i < us.size(); ++i) us[i] = std::max(us[i], theirs[i]);
  if (rank_ != 0) return 0;
  const double t = median(us);
  const double moved = static_cast<double>(bytes) * (d == Dir::Bidir ? 2 : 1);
  const double gbps = moved / (t * 1e-6) / 1e9;
  rows_.push_back(Row{name, bytes, t, gbps, ceGbps > 0 ? gbps / ceGbps : NAN,
                      wrong == 0 ? "ok" : detail::concat(wrong, " wrong")});
  std::printf("  %-40s %12llu %10.2f %9.2f\n", name.c_str(), static_cast<unsigned long long>(bytes), t, gbps);
  std::fflush(stdout);
  return gbps;
}

void Bench::latencyRow(const std::string& name, uint64_t bytes, double roundTrips, const Work& work,
                       const std::string& check) {
  std::vector<float> us = timeLoop(opts_.warmup > 0 ? 1 : 0, std::max(opts_.iters, 20), work);
  if (rank_ != 0) return;
  const double t = median(us) / roundTrips / 2;
  rows_.push_back(
      Row{name, bytes, t, bytes > 0 ? static_cast<double>(bytes) / (t * 1e-6) / 1e9 : NAN, NAN, check});
  std::printf("  %-40s %12llu %10.3f\n", name.c_str(), static_cast<unsigned long long>(bytes), t);
  std::fflush(stdout);
}

Bench::Work Bench::ceWork(Dir d, uint64_t bytes) {
  return [this, d, bytes](cudaStream_t s) {
    if (sender(d))
      MESHCOMM_CUDA_CHECK(cudaMemcpyAsync(remoteDst_.data(), src_.data(), bytes, cudaMemcpyDefault, s));
  };
}

double Bench::peerCopyMicros(Dir d, uint64_t bytes) {
  if (peerStream_ == nullptr) {
    const int err = cudaDeviceEnablePeerAccess(peerDevice_, 0);
    if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled) MESHCOMM_CUDA_CHECK(err);
    cudaGetLastError();  // clear cudaErrorPeerAccessAlreadyEnabled
    localDstForPeer_ = GpuBuffer(opts_.maxBytes);
    CudaDeviceGuard onPeer(peerDevice_);
    const int err2 = cudaDeviceEnablePeerAccess(comm_.cudaDevice(), 0);
    if (err2 != cudaSuccess && err2 != cudaErrorPeerAccessAlreadyEnabled) MESHCOMM_CUDA_CHECK(err2);
    cudaGetLastError();
    peerDst_ = GpuBuffer(opts_.maxBytes);
    peerSrc_ = GpuBuffer(opts_.maxBytes);
    MESHCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&peerStream_, cudaStreamNonBlocking));
  }
  const int self = comm_.cudaDevice();
  cudaEvent_t begin, peerDone;
  MESHCOMM_CUDA_CHECK(cudaEventCreateWithFlags(&begin, cudaEventDisableTiming));
  {  // an event is recorded only on streams of the device it was created on
    CudaDeviceGuard onPeer(peerDevice_);
    MESHCOMM_CUDA_CHECK(cudaEventCreateWithFlags(&peerDone, cudaEventDisableTiming));
  }
  auto work = [&](cudaStream_t s) {
    if (d == Dir::Bidir) {  // the reverse copy starts with the forward one on the peer device's stream
      MESHCOMM_CUDA_CHECK(cudaEventRecord(begin, s));
      MESHCOMM_CUDA_CHECK(cudaStreamWaitEvent(peerStream_, begin));
      MESHCOMM_CUDA_CHECK(cudaMemcpyPeerAsync(localDstForPeer_.data(), self, peerSrc_.data(), peerDevice_,
                                              bytes, peerStream_));
      MESHCOMM_CUDA_CHECK(cudaEventRecord(peerDone, peerStream_));
    }
    MESHCOMM_CUDA_CHECK(cudaMemcpyPeerAsync(peerDst_.data(), peerDevice_, src_.data(), self, bytes, s));
    if (d == Dir::Bidir) MESHCOMM_CUDA_CHECK(cudaStreamWaitEvent(s, peerDone));  // joined back into `s`
  };
  std::vector<float> us;
  for (int i = 0; i < opts_.warmup + opts_.iters; ++i) {
    cudaEvent_t a, b;
    MESHCOMM_CUDA_CHECK(cudaEventCreate(&a));
    MESHCOMM_CUDA_CHECK(cudaEventCreate(&b));
    MESHCOMM_CUDA_CHECK(cudaEventRecord(a, stream_));
    work(stream_);
    MESHCOMM_CUDA_CHECK(cudaEventRecord(b, stream_));
    MESHCOMM_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    MESHCOMM_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i >= opts_.warmup) us.push_back(ms * 1000.0f);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(peerDone);
  return median(us);
}

double Bench::peerCopyRow(Dir d, uint64_t bytes) {
  double gbps = 0;
  if (rank_ == 0) {
    const double t = peerCopyMicros(d, bytes);
    gbps = static_cast<double>(bytes) * (d == Dir::Bidir ? 2 : 1) / (t * 1e-6) / 1e9;
    const std::string name = detail::concat("ce_peer_", dirName(d));
    rows_.push_back(Row{name, bytes, t, gbps, 1.0, "-"});
    std::printf("  %-40s %12llu %10.2f %9.2f\n", name.c_str(), static_cast<unsigned long long>(bytes), t,
                gbps);
    std::fflush(stdout);
  }
  swap<int>(0);  // rank 1 waits here while rank 0 uses both devices
  return gbps;
}

Bench::Work Bench::memWork(Dir d, uint64_t bytes, const MemConfig& c) {
  return [this, d, bytes, c](cudaStream_t s) {
    auto* chans = static_cast<const MemoryChannelDeviceHandle*>(chanHandles_.data());
    const auto ack = ackSem_->deviceHandle();
    if (sender(d)) {
      const int recv = d == Dir::Bidir, waitAck = d == Dir::OneWay;
      if (c.unroll == 8)
        memPutKernel<8><<<c.blocks, c.threads, 0, s>>>(chans, bytes, recv, ack, waitAck);
      else
        memPutKernel<4><<<c.blocks, c.threads, 0, s>>>(chans, bytes, recv, ack, waitAck);
    } else {
      memRecvKernel<<<1, kMaxThreads, 0, s>>>(chans, c.blocks, ack);
    }
    MESHCOMM_CUDA_CHECK(cudaGetLastError());
  };
}

Bench::Work Bench::portWork(Dir d, uint64_t bytes, uint64_t chunk) {
  return [this, d, bytes, chunk](cudaStream_t s) {
    portPutKernel<<<1, 1, 0, s>>>(port_, bytes, chunk, sender(d), receiver(d));
    MESHCOMM_CUDA_CHECK(cudaGetLastError());
  };
}

int Bench::residentBlocks(const MemConfig& c) const {
  int perSm = 0;
  if (c.unroll == 8)
    MESHCOMM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, memPutKernel<8>, c.threads, 0));
  else
    MESHCOMM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, memPutKernel<4>, c.threads, 0));
  return perSm * sms_;
}

void Bench::run() {
  const uint64_t maxBytes = opts_.maxBytes;
  std::vector<uint64_t> sizes;
  for (uint64_t b = opts_.minBytes; b < maxBytes; b *= 2) sizes.push_back(b);
  sizes.push_back(maxBytes);
  const Dir dirs[] = {Dir::OneWay, Dir::Bidir};
  const int nChannels = static_cast<int>(chans_.size());
  if (rank_ == 0) {
    std::printf(
        "meshcomm-channel-bench: rank 0 (%s, %d SMs) <-> rank 1; %d warm-up + %d timed iterations, "
        "median; max %s\n",
        prop_.name, sms_, opts_.warmup, opts_.iters, sizeName(maxBytes).c_str());
    std::printf("  %-40s %12s %10s %9s\n", "test", "bytes", "time_us", "GB/s");
  }

  // (1) Copy-engine baseline.
  std::vector<double> ce[2];
  for (Dir d : dirs)
    for (uint64_t b : sizes) {
      const double ipc = bandwidthRow(detail::concat("ce_memcpy_", dirName(d)), d, b, ceWork(d, b), -1);
      const double peer = peerCopyRow(d, b);
      const double best = std::max(ipc, peer);
      ce[d == Dir::Bidir].push_back(best);
      if (rank_ == 0) {  // the last two rows are this size's baselines
        rows_[rows_.size() - 2].ratio = ipc / best;
        rows_.back().ratio = peer / best;
      }
    }
  auto ceAt = [&](Dir d, size_t i) { return ce[d == Dir::Bidir][i]; };

  // (2) MemoryChannel put: try configurations at the largest size, sweep with the best.
  const std::vector<MemConfig> configs = {{sms_, 1024, 4},    {sms_, 1024, 8},     {2 * sms_, 512, 4},
                                          {2 * sms_, 512, 8}, {2 * sms_, 1024, 4}, {4 * sms_, 256, 8},
                                          {4 * sms_, 512, 4}};
  for (Dir d : dirs) {
    double best = -1;
    int bestIndex = 0;
    for (size_t k = 0; k < configs.size(); ++k) {
      MemConfig c = configs[k];
      c.blocks = std::min(c.blocks, nChannels);
      // Bidirectional blocks wait for the peer's matching block: keep them all resident.
      if (d == Dir::Bidir) c.blocks = std::min(c.blocks, residentBlocks(c));
      const double g = bandwidthRow(detail::concat("memchan_put_", dirName(d), "[", c.name(), "]"), d,
                                    maxBytes, memWork(d, maxBytes, c), ceAt(d, sizes.size() - 1));
      if (g > best) {
        best = g;
        bestIndex = static_cast<int>(k);
      }
    }
    if (const int fromRank0 = swap<int>(bestIndex); rank_ != 0) bestIndex = fromRank0;  // rank 0 decides
    MemConfig c = configs[bestIndex];
    c.blocks = std::min(c.blocks, nChannels);
    if (d == Dir::Bidir) c.blocks = std::min(c.blocks, residentBlocks(c));
    double atMax = 0;
    for (size_t i = 0; i < sizes.size(); ++i)
      atMax = bandwidthRow(detail::concat("memchan_put_", dirName(d)), d, sizes[i], memWork(d, sizes[i], c),
                           ceAt(d, i));
    if (rank_ == 0)
      targets_.push_back(detail::concat("memchan_put_", dirName(d), " ", sizeName(maxBytes), " [", c.name(),
                                        "]: ", atMax / ceAt(d, sizes.size() - 1)));
  }

  // (3) PortChannel put (proxy + copy engine): chunk sizes at the largest size, sweep with the best.
  std::vector<uint64_t> chunks;
  for (uint64_t ch : {4ull << 20, 16ull << 20, 64ull << 20})
    if (ch < maxBytes) chunks.push_back(ch);
  chunks.push_back(maxBytes);
  for (Dir d : dirs) {
    double best = -1;
    int bestIndex = 0;
    for (size_t k = 0; k < chunks.size(); ++k) {
      const double g =
          bandwidthRow(detail::concat("portchan_put_", dirName(d), "[chunk=", sizeName(chunks[k]), "]"), d,
                       maxBytes, portWork(d, maxBytes, chunks[k]), ceAt(d, sizes.size() - 1));
      if (g > best) {
        best = g;
        bestIndex = static_cast<int>(k);
      }
    }
    if (const int fromRank0 = swap<int>(bestIndex); rank_ != 0) bestIndex = fromRank0;  // rank 0 decides
    const uint64_t chunk = chunks[bestIndex];
    double atMax = 0;
    for (size_t i = 0; i < sizes.size(); ++i)
      atMax = bandwidthRow(detail::concat("portchan_put_", dirName(d)), d, sizes[i],
                           portWork(d, sizes[i], std::min(chunk, sizes[i])), ceAt(d, i));
    if (rank_ == 0)
      targets_.push_back(detail::concat("portchan_put_", dirName(d), " ", sizeName(maxBytes), " [chunk=",
                                        sizeName(chunk), "]: ", atMax / ceAt(d, sizes.size() - 1)));
  }

  // (4) Signal/wait latency.
  {
    constexpr int kRoundTrips = 10000;
    const auto sem = latSem_->deviceHandle();
    latencyRow(
        "memchan_signal_wait_latency", 0, kRoundTrips,
        [&](cudaStream_t s) {
          memPingPongKernel<<<1, 1, 0, s>>>(sem, kRoundTrips, rank_ == 0);
          MESHCOMM_CUDA_CHECK(cudaGetLastError());
        },
        "-");
  }
  {
    constexpr int kRoundTrips = 1000;
    latencyRow(
        "portchan_signal_wait_latency", 0, kRoundTrips,
        [&](cudaStream_t s) {
          portPingPongKernel<<<1, 1, 0, s>>>(port_, kRoundTrips, rank_ == 0);
          MESHCOMM_CUDA_CHECK(cudaGetLastError());
        },
        "-");
  }

  // (5) LL16 packet latency, 8 B .. 64 KB; the echo that comes back must equal rank 0's data.
  {
    constexpr int kRoundTrips = 1000;
    constexpr uint64_t kOut = 64 << 10;  // unpack target: second half of llLocal_
    const MemoryChannelDeviceHandle ll = llChan_.deviceHandle();
    for (uint64_t bytes = 8; bytes <= (64u << 10); bytes *= 2) {
      const int threads =
          static_cast<int>(std::min<uint64_t>(kMaxThreads, std::max<uint64_t>(32, bytes / 8)));
      MESHCOMM_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(llLocal_.data()) + kOut, 0, bytes, stream_));
      latencyRow(
          detail::concat("ll16_latency"), bytes, kRoundTrips,
          [&](cudaStream_t s) {
            llPingPongKernel<<<1, threads, 0, s>>>(ll, bytes, kRoundTrips, llFlag_, rank_ == 0, kOut);
            MESHCOMM_CUDA_CHECK(cudaGetLastError());
            llFlag_ += kRoundTrips;  // every launch continues the flag sequence
          },
          "");
      // Check: both ranks' unpacked data equals rank 0's pattern.
      unsigned long long wrong = 0;
      MESHCOMM_CUDA_CHECK(cudaMemsetAsync(wrong_.data(), 0, sizeof(unsigned long long), stream_));
      countWrongKernel<<<8, 256, 0, stream_>>>(
          reinterpret_cast<const uint32_t*>(static_cast<const char*>(llLocal_.data()) + kOut), bytes / 4,
          0x5EED0, static_cast<unsigned long long*>(wrong_.data()));
      MESHCOMM_CUDA_CHECK(cudaGetLastError());
      MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      MESHCOMM_CUDA_CHECK(cudaMemcpy(&wrong, wrong_.data(), sizeof(wrong), cudaMemcpyDeviceToHost));
      wrong += swap<unsigned long long>(wrong);
      if (rank_ == 0) rows_.back().check = wrong == 0 ? "ok" : detail::concat(wrong, " wrong");
    }
  }

  if (rank_ == 0) {
    print();
    if (!opts_.json.empty()) writeJson(opts_.json);
  }
}

void Bench::print() const {
  std::printf("\n%-44s %12s %11s %9s %8s  %s\n", "test", "bytes", "time_us", "GB/s", "vs_CE", "check");
  for (const Row& r : rows_) {
    char gbps[32] = "-", ratio[32] = "-";
    if (!std::isnan(r.gbps)) std::snprintf(gbps, sizeof(gbps), "%.2f", r.gbps);
    if (!std::isnan(r.ratio)) std::snprintf(ratio, sizeof(ratio), "%.3f", r.ratio);
    std::printf("%-44s %12llu %11.3f %9s %8s  %s\n", r.test.c_str(), static_cast<unsigned long long>(r.bytes),
                r.timeUs, gbps, ratio, r.check.c_str());
  }
  std::printf("\n");
  for (const std::string& t : targets_) {
    const double ratio = std::atof(t.substr(t.rfind(' ') + 1).c_str());
    std::printf("TARGET %s of CE (>= 0.90: %s)\n", t.c_str(), ratio >= 0.9 ? "PASS" : "FAIL");
  }
  std::fflush(stdout);
}

void Bench::writeJson(const std::string& path) const {
  std::ofstream f(path);
  if (!f) MESHCOMM_THROW(ErrorCode::SystemError, "meshcomm-channel-bench: cannot write ", path);
  nlohmann::json j = tools::runRecord("meshcomm-channel-bench", prop_.name, comm_.size(), opts_.command);
  j["sms"] = sms_;
  j["iters"] = opts_.iters;
  j["warmup"] = opts_.warmup;
  nlohmann::json rows = nlohmann::json::array();
  for (const Row& r : rows_) {
    rows.push_back({{"test", r.test},
                    {"bytes", r.bytes},
                    {"time_us", tools::numberOrNull(r.timeUs)},
                    {"gbps", tools::numberOrNull(r.gbps)},
                    {"ratio_vs_ce", tools::numberOrNull(r.ratio)},
                    {"check", r.check}});
  }
  j["rows"] = std::move(rows);
  j["targets"] = targets_;
  f << j.dump(1) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  Options opts;
  try {
    opts = parseArgs(argc, argv);
    opts.command = tools::commandLine(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  int exitCode = 0;
  const std::optional<RankEnv> rankEnv =
      tools::prepareGpuToolRank("meshcomm-channel-bench", argv[0], 2, exitCode);
  if (!rankEnv) return exitCode;
  const RankEnv& env = *rankEnv;
  try {
    MESHCOMM_CUDA_CHECK(cudaSetDevice(env.localRank));
    // This file's kernels are launched behind PortChannel kernels that wait on the proxy: load them now, not
    // lazily then (docs/architecture.md, "Kernel loading").
    loadKernelModuleOf(reinterpret_cast<const void*>(&fillKernel));
    auto bootstrap = TcpBootstrap::fromEnvironment();
    Communicator comm(bootstrap, env.localRank);
    if (comm.rank() < 2) {
      Bench bench(comm, opts);
      bench.run();
    } else {
      std::printf("[rank %d] meshcomm-channel-bench measures ranks 0 and 1 only; idle\n", comm.rank());
    }
    bootstrap->barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] meshcomm-channel-bench: %s\n", env.rank, e.what());
    return 1;
  }
  return 0;
}
