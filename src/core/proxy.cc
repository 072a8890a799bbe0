// ProxyService: one host thread drains the FIFO of triggers that PortChannels push from the GPU and turns
// each into connection operations. Flushes are asynchronous where the connection allows it (tickets), so one
// draining flush never stalls other channels; `flushed` is published in FIFO order as flushes complete.
#include "meshcomm/proxy.hpp"

#include <cuda_runtime.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "base/kernel_modules.hpp"
#include "base/logging.hpp"
#include "core/append_only_table.hpp"
#include "core/fifo.hpp"
#include "core/proxy_trigger.hpp"
#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/host_poll.hpp"
#include "transport/transport_common.hpp"

namespace meshcomm {

namespace {

// How long the proxy spins hot after its last piece of work, and its longest nap per idle round afterwards
// (the first trigger after a long idle period waits at most about one nap).
constexpr auto kHotSpin = std::chrono::microseconds(100);
constexpr auto kNap = std::chrono::microseconds(10);
// Triggers served before the proxy also looks at pending flushes.
constexpr int kTriggerBatch = 64;

// Where the proxy thread's time went, logged at DEBUG when it stops: enough to tell host-side trigger cost
// (copies, signals, flush requests) from waiting for work. Flush polling counts every look at pending
// flushes, also the one each flush request ends with (so it overlaps the flush requests' time).
struct ProxyStats {
  uint64_t triggers = 0, writes = 0, bytes = 0, signals = 0, flushes = 0, naps = 0;
  uint64_t writeNs = 0, signalNs = 0, flushNs = 0, progressNs = 0;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  static uint64_t since(std::chrono::steady_clock::time_point t) {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t).count());
  }
  // Runs work(), adding its host time to `ns` and one to `count`.
  template <typename Work>
  static void timed(uint64_t& ns, uint64_t& count, Work&& work) {
    const auto begin = std::chrono::steady_clock::now();
    work();
    ns += since(begin);
    ++count;
  }
  std::string summary() const {
    auto us = [](uint64_t ns) { return static_cast<double>(ns) / 1e3; };
    return detail::concat(triggers, " triggers in ", us(since(started)), " us: ", writes, " copies (", bytes,
                          " bytes) ", us(writeNs), " us, ", signals, " signals ", us(signalNs), " us, ",
                          flushes, " flushes ", us(flushNs), " us, flush polling ", us(progressNs), " us, ",
                          naps, " naps");
  }
};

// "0-15,32-47" -> set. Returns false on malformed text.
bool parseCpuList(const std::string& text, cpu_set_t* set) {
  CPU_ZERO(set);
  std::stringstream ss(text);
  std::string range;
  while (std::getline(ss, range, ',')) {
    if (range.empty() || range == "\n") continue;
    int first = -1, last = -1;
    char dash = 0;
    std::stringstream rs(range);
    if (!(rs >> first)) return false;
    last = first;
    if (rs >> dash && !(dash == '-' && rs >> last)) return false;
    if (first < 0 || last < first || last >= CPU_SETSIZE) return false;
    for (int c = first; c <= last; ++c) CPU_SET(c, set);
  }
  return true;
}

// Best effort: runs the calling thread on the CPUs local to the GPU's PCIe root (its NUMA node), within the
// CPUs the process is already allowed to use, so trigger reads and host-mapped writes stay node-local.
void bindToGpuLocalCpus(int device) {
  char busId[64] = {};
  if (cudaDeviceGetPCIBusId(busId, sizeof(busId), device) != cudaSuccess) return;
  std::string id(busId);
  for (auto& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::ifstream file("/sys/bus/pci/devices/" + id + "/local_cpulist");
  std::string list;
  cpu_set_t local;
  if (!std::getline(file, list) || !parseCpuList(list, &local)) return;
  cpu_set_t allowed;
  if (pthread_getaffinity_np(pthread_self(), sizeof(allowed), &allowed) != 0) return;
  CPU_AND(&local, &local, &allowed);
  if (CPU_COUNT(&local) == 0) return;  // the launcher pinned us elsewhere: respect it
  if (pthread_setaffinity_np(pthread_self(), sizeof(local), &local) == 0) {
    MESHCOMM_LOG(DEBUG, "proxy thread of device ", device, " bound to CPUs ", list);
  }
}

void logErrorQuietly(const std::string& text) noexcept {
  try {
    MESHCOMM_LOG(ERROR, text);
  } catch (...) {
  }
}

}  // namespace

class ProxyService::Impl {
 public:
  Impl(Communicator& comm, size_t fifoSize);
  ~Impl() { stop(); }

  SemaphoreId addSemaphore(const std::shared_ptr<Connection>& conn, int tag);
  MemoryId addMemory(RegisteredMemory mem);
  PortChannel portChannel(SemaphoreId sem, MemoryId dst, MemoryId src) const;
  void start();
  void warnOnceUnderLazyLoading() const;
  void stop();
  void checkError() const;

 private:
  struct Channel {
    std::shared_ptr<Host2DeviceSemaphore> semaphore;
    Connection* connection = nullptr;                      // owned by the semaphore
    internal::AsyncFlushConnection* asyncFlush = nullptr;  // null: the connection only has a blocking flush
    int peer = -1;
  };
  struct Memory {
    RegisteredMemory memory;
    internal::TriggerMemoryInfo info{};
  };
  // A flush trigger whose connection has not drained yet; `flushed` is published in position order.
  struct PendingFlush {
    uint64_t position;
    internal::AsyncFlushConnection* connection;  // null: already complete
    uint64_t ticket;
  };

  static uint64_t fifoSizeFor(size_t requested);

  // ---- proxy thread ----
  void threadMain() noexcept;
  void run();
  bool serveTriggers();
  void execute(const ProxyTrigger& trigger, uint64_t position);
  void startFlush(const Channel& channel, uint64_t position);
  bool progressFlushes();

  Communicator& comm_;
  const int rank_;
  const int device_;
  const internal::Fifo fifo_;

  std::mutex setupMutex_;  // serialises appends (the tables allow one writer)
  internal::AppendOnlyTable<Channel, TriggerLayout::kMaxChannels> channels_;
  internal::AppendOnlyTable<Memory, TriggerLayout::kMaxMemories> memories_;

  // Proxy-thread state, kept across stop/start so that a restarted proxy resumes where it stopped.
  uint64_t tail_ = 0;  // next FIFO position to serve
  std::deque<PendingFlush> pendingFlushes_;
  ProxyStats stats_;

  std::mutex lifecycleMutex_;
  std::thread thread_;
  std::atomic<bool> stopRequested_{false};
  mutable std::mutex errorMutex_;
  std::exception_ptr error_;
};

// ---- setup -----------------------------------------------------------------------------------------------

uint64_t ProxyService::Impl::fifoSizeFor(size_t requested) {
  if (requested == 0)
    return internal::Fifo::validatedSize(envInt("MESHCOMM_FIFO_SIZE"), "MESHCOMM_FIFO_SIZE");
  return internal::Fifo::validatedSize(static_cast<int64_t>(std::min<size_t>(requested, INT64_MAX)),
                                       "ProxyService(fifoSize)");
}

ProxyService::Impl::Impl(Communicator& comm, size_t fifoSize)
    : comm_(comm), rank_(comm.rank()), device_(comm.cudaDevice()), fifo_(device_, fifoSizeFor(fifoSize)) {}

SemaphoreId ProxyService::Impl::addSemaphore(const std::shared_ptr<Connection>& conn, int tag) {
  MESHCOMM_REQUIRE(conn != nullptr, "rank ", rank_, ": ProxyService::buildAndAddSemaphore(tag ", tag,
                   "): the connection is null");
  // (pair) Built outside the lock: it waits for the peer.
  auto semaphore = std::make_shared<Host2DeviceSemaphore>(comm_, conn, tag);
  Channel channel;
  channel.connection = semaphore->connection().get();
  channel.asyncFlush = dynamic_cast<internal::AsyncFlushConnection*>(channel.connection);
  channel.peer = channel.connection->remoteRank();
  channel.semaphore = std::move(semaphore);
  std::lock_guard<std::mutex> lock(setupMutex_);
  MESHCOMM_REQUIRE(channels_.size() < channels_.capacity(), "rank ", rank_,
                   ": ProxyService::buildAndAddSemaphore: more than ", channels_.capacity(),
                   " semaphores (the FIFO trigger's channel field has ", TriggerLayout::kChannelBits,
                   " bits)");
  return static_cast<SemaphoreId>(channels_.append(std::move(channel)));
}

MemoryId ProxyService::Impl::addMemory(RegisteredMemory mem) {
  MESHCOMM_REQUIRE(static_cast<bool>(mem), "rank ", rank_,
                   ": ProxyService::addMemory: empty RegisteredMemory");
  Memory entry;
  entry.info = {mem.size(), mem.rank(), mem.isLocal()};
  entry.memory = std::move(mem);
  std::lock_guard<std::mutex> lock(setupMutex_);
  MESHCOMM_REQUIRE(memories_.size() < memories_.capacity(), "rank ", rank_,
                   ": ProxyService::addMemory: more than ", memories_.capacity(),
                   " memories (the FIFO trigger's memory fields have ", TriggerLayout::kMemoryBits, " bits)");
  return static_cast<MemoryId>(memories_.append(std::move(entry)));
}

PortChannel ProxyService::Impl::portChannel(SemaphoreId sem, MemoryId dst, MemoryId src) const {
  const size_t nChannels = channels_.size();
  const size_t nMemories = memories_.size();
  MESHCOMM_REQUIRE(sem < nChannels, "rank ", rank_, ": ProxyService::portChannel: semaphore id ", sem,
                   " does not exist (", nChannels, " semaphores)");
  MESHCOMM_REQUIRE(dst < nMemories, "rank ", rank_, ": ProxyService::portChannel: dst memory id ", dst,
                   " does not exist (", nMemories, " memories)");
  MESHCOMM_REQUIRE(src < nMemories, "rank ", rank_, ": ProxyService::portChannel: src memory id ", src,
                   " does not exist (", nMemories, " memories)");
  const Channel& channel = channels_[sem];
  const Memory& dstMem = memories_[dst];
  const Memory& srcMem = memories_[src];
  MESHCOMM_REQUIRE(dstMem.info.owner == channel.peer, "rank ", rank_,
                   ": ProxyService::portChannel: dst memory id ", dst, " belongs to rank ", dstMem.info.owner,
                   ", but semaphore ", sem, " connects to peer ", channel.peer);
  MESHCOMM_REQUIRE(srcMem.info.local, "rank ", rank_, ": ProxyService::portChannel: src memory id ", src,
                   " belongs to rank ", srcMem.info.owner, ", not this rank");
  const bool streamWork = channel.connection->transport() == Transport::CudaIpc ||
                          dstMem.memory.kind() != MemoryKind::Host ||
                          srcMem.memory.kind() != MemoryKind::Host;
  if (streamWork) warnOnceUnderLazyLoading();
  PortChannelDeviceHandle handle{};
  handle.semaphore = channel.semaphore->deviceHandle();
  handle.fifo = fifo_.deviceHandle(handle.semaphore.spin);  // FIFO timeouts name this channel's peer
  handle.channelId = sem;
  handle.dstMemoryId = dst;
  handle.srcMemoryId = src;
  return PortChannel(handle);
}

// ---- lifecycle -------------------------------------------------------------------------------------------

void ProxyService::Impl::start() {
  std::lock_guard<std::mutex> lock(lifecycleMutex_);
  MESHCOMM_REQUIRE(!thread_.joinable(), "rank ", rank_,
                   ": ProxyService::startProxy: the proxy is already running");
  {
    std::lock_guard<std::mutex> errorLock(errorMutex_);
    MESHCOMM_REQUIRE(
        error_ == nullptr, "rank ", rank_,
        ": ProxyService::startProxy: the proxy stopped on an error (see checkError()); build a new "
        "ProxyService");
  }
  stopRequested_.store(false);
  thread_ = std::thread([this] { threadMain(); });
}

// Under lazy loading, a kernel of the process loaded for the first time while a PortChannel kernel waits
// holds back the stream work that kernel waits for (a CUDA IPC copy or signal; over TCP, staging device
// memory), until the device timeout. Channels between host memories over TCP queue no GPU work and are not
// exposed.
void ProxyService::Impl::warnOnceUnderLazyLoading() const {
  static std::once_flag once;
  std::call_once(once, [this] {
    if (!internal::lazyKernelLoading()) return;
    MESHCOMM_LOG(
        WARN, "rank ", rank_,
        ": a PortChannel whose transfers are GPU stream work runs under CUDA lazy loading "
        "(CUDA_MODULE_LOADING=LAZY, the default): the first launch of a kernel synchronizes the "
        "context, so a kernel launched for the first time while a PortChannel kernel waits stalls "
        "the proxy's copies until the device timeout. meshcomm's kernels are preloaded; load your own "
        "with meshcomm::loadKernelModuleOf(kernel), warm them up before communicating, or set "
        "CUDA_MODULE_LOADING=EAGER");
  });
}

void ProxyService::Impl::stop() {
  std::lock_guard<std::mutex> lock(lifecycleMutex_);
  stopRequested_.store(true);
  if (thread_.joinable()) thread_.join();
}

void ProxyService::Impl::checkError() const {
  std::lock_guard<std::mutex> lock(errorMutex_);
  if (error_) std::rethrow_exception(error_);
}

// ---- proxy thread ----------------------------------------------------------------------------------------

void ProxyService::Impl::threadMain() noexcept {
  std::exception_ptr error;
  try {
    run();
    return;
  } catch (const std::exception& e) {
    error = std::current_exception();
    logErrorQuietly(detail::concat("rank ", rank_, ": proxy stopped: ", e.what()));
  } catch (...) {
    error = std::current_exception();
    logErrorQuietly(detail::concat("rank ", rank_, ": proxy stopped on an unknown exception"));
  }
  std::lock_guard<std::mutex> lock(errorMutex_);
  error_ = error;
}

void ProxyService::Impl::run() {
  internal::prepareWorkerThread(device_);
  bindToGpuLocalCpus(device_);
  (void)prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 us: naps stay short (the default slack is 50 us)
  HostPoll idle(kHotSpin, kNap);           // restarted by every piece of work
  stats_ = ProxyStats{};
  while (!stopRequested_.load(std::memory_order_relaxed)) {
    const bool servedTriggers = serveTriggers();
    const bool completedFlushes = progressFlushes();
    if (servedTriggers || completedFlushes) {
      idle = HostPoll(kHotSpin, kNap);
    } else if (idle.pause()) {
      ++stats_.naps;
    }
  }
  MESHCOMM_LOG(DEBUG, "rank ", rank_, ": proxy stopped: ", stats_.summary());
}

bool ProxyService::Impl::serveTriggers() {
  ProxyTrigger trigger;
  int served = 0;
  while (served < kTriggerBatch && fifo_.tryRead(tail_, &trigger)) {
    const uint64_t position = tail_++;
    fifo_.publishTail(tail_);  // the trigger is copied: the GPU may reuse its slot
    execute(trigger, position);
    ++served;
  }
  return served > 0;
}

void ProxyService::Impl::execute(const ProxyTrigger& trigger, uint64_t position) {
  const internal::DecodedTrigger t = internal::decodeTrigger(trigger);
  const auto problem = internal::checkTrigger(
      t, channels_.size(), [&](uint64_t c) { return channels_[c].peer; }, memories_.size(),
      [&](uint64_t m) { return memories_[m].info; });
  if (problem) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", rank_, ": proxy: FIFO trigger at position ", position,
                   ": ", *problem, "; nothing was copied and the proxy stopped");
  }
  const Channel& channel = channels_[t.channel];
  ++stats_.triggers;
  if ((t.type & kTriggerData) != 0 && t.bytes > 0) {
    ProxyStats::timed(stats_.writeNs, stats_.writes, [&] {
      channel.connection->write(memories_[t.dstMemory].memory, t.dstOffset, memories_[t.srcMemory].memory,
                                t.srcOffset, t.bytes);
    });
    stats_.bytes += t.bytes;
  }
  if ((t.type & kTriggerSignal) != 0)  // same connection: lands after the write
    ProxyStats::timed(stats_.signalNs, stats_.signals, [&] { channel.semaphore->signal(); });
  if ((t.type & kTriggerFlush) != 0)
    ProxyStats::timed(stats_.flushNs, stats_.flushes, [&] { startFlush(channel, position); });
}

void ProxyService::Impl::startFlush(const Channel& channel, uint64_t position) {
  if (channel.asyncFlush != nullptr) {
    pendingFlushes_.push_back({position, channel.asyncFlush, channel.asyncFlush->requestFlush()});
  } else {
    channel.connection->flush();
    pendingFlushes_.push_back({position, nullptr, 0});
  }
  progressFlushes();
}

bool ProxyService::Impl::progressFlushes() {
  if (pendingFlushes_.empty()) return false;
  const auto begin = std::chrono::steady_clock::now();
  bool progressed = false;
  while (!pendingFlushes_.empty()) {
    const PendingFlush& f = pendingFlushes_.front();
    if (f.connection != nullptr && !f.connection->flushCompleted(f.ticket)) break;
    fifo_.publishFlushed(f.position + 1);
    pendingFlushes_.pop_front();
    progressed = true;
  }
  stats_.progressNs += ProxyStats::since(begin);
  return progressed;
}

// ---- ProxyService ----------------------------------------------------------------------------------------

ProxyService::ProxyService(Communicator& comm, size_t fifoSize)
    : impl_(std::make_unique<Impl>(comm, fifoSize)) {}
ProxyService::~ProxyService() = default;
SemaphoreId ProxyService::buildAndAddSemaphore(const std::shared_ptr<Connection>& conn, int tag) {
  return impl_->addSemaphore(conn, tag);
}
MemoryId ProxyService::addMemory(RegisteredMemory mem) {
  return impl_->addMemory(std::move(mem));
}
PortChannel ProxyService::portChannel(SemaphoreId sem, MemoryId dst, MemoryId src) {
  return impl_->portChannel(sem, dst, src);
}
void ProxyService::startProxy() {
  impl_->start();
}
void ProxyService::stopProxy() {
  impl_->stop();
}
void ProxyService::checkError() const {
  impl_->checkError();
}

}  // namespace meshcomm
