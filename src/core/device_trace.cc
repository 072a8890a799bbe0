#include "core/device_trace.hpp"

#include <cuda_runtime.h>

#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "base/logging.hpp"
#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

std::unique_ptr<DeviceTraceBuffer> DeviceTraceBuffer::fromEnvironment(const std::string& component, int rank,
                                                                      std::vector<std::string> eventNames) {
  const std::optional<std::string> prefix = envRaw("MESHCOMM_TRACE");
  if (!prefix) return nullptr;
  const int64_t capacity = envInt("MESHCOMM_TRACE_EVENTS");
  MESHCOMM_REQUIRE(capacity > 0 && capacity <= (int64_t{1} << 28), "rank ", rank,
                   ": MESHCOMM_TRACE_EVENTS=", capacity, " must be from 1 to 2^28");
  // The k-th buffer of this component in the process (several communicators, or several instances of a
  // plan): its own file.
  static std::mutex mutex;
  static std::map<std::string, int> made;
  int k = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    k = made[component]++;
  }
  const std::string path =
      *prefix + "." + component + "." + std::to_string(k) + ".rank" + std::to_string(rank) + ".json";
  return std::make_unique<DeviceTraceBuffer>(path, component, rank, std::move(eventNames),
                                             static_cast<uint32_t>(capacity));
}

DeviceTraceBuffer::DeviceTraceBuffer(std::string path, std::string component, int rank,
                                     std::vector<std::string> eventNames, uint32_t capacity)
    : path_(std::move(path)),
      component_(std::move(component)),
      rank_(rank),
      eventNames_(std::move(eventNames)),
      capacity_(capacity),
      buffer_((2 * static_cast<size_t>(capacity) + 1) * sizeof(uint64_t)) {
  MESHCOMM_CUDA_CHECK(cudaGetDevice(&device_));
}

DeviceTraceBuffer::~DeviceTraceBuffer() {
  if (written_) return;
  try {
    write();
  } catch (const std::exception& e) {
    MESHCOMM_LOG(WARN, "rank ", rank_, ": device trace ", component_, ": not written to ", path_, ": ",
                 e.what());
  }
}

DeviceTrace DeviceTraceBuffer::view() const {
  DeviceTrace t;
  t.events = static_cast<uint64_t*>(buffer_.data());
  t.cursor = reinterpret_cast<unsigned long long*>(t.events + 2 * static_cast<size_t>(capacity_));
  t.capacity = capacity_;
  return t;
}

void DeviceTraceBuffer::write() {
  written_ = true;
  std::vector<uint64_t> host(2 * static_cast<size_t>(capacity_) + 1);
  {
    CudaDeviceGuard guard(device_);
    MESHCOMM_CUDA_CHECK(cudaDeviceSynchronize());
    MESHCOMM_CUDA_CHECK(
        cudaMemcpy(host.data(), buffer_.data(), host.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  }
  const uint64_t claimed = host.back();
  std::ofstream out(path_);
  MESHCOMM_REQUIRE(out.good(), "rank ", rank_, ": device trace ", component_, ": cannot open ", path_);
  out << deviceTraceJson(component_, rank_, eventNames_, host.data(), claimed, capacity_);
  MESHCOMM_REQUIRE(out.good(), "rank ", rank_, ": device trace ", component_, ": writing ", path_, " failed");
  MESHCOMM_LOG(INFO, "rank ", rank_, ": device trace ", component_, ": ", claimed, " events written to ",
               path_);
}

std::string deviceTraceJson(const std::string& component, int rank,
                            const std::vector<std::string>& eventNames, const uint64_t* events,
                            uint64_t claimed, uint32_t capacity) {
  const uint64_t kept = claimed < capacity ? claimed : capacity;
  nlohmann::json rows = nlohmann::json::array();
  for (uint64_t i = 0; i < kept; ++i) {
    const uint64_t w = events[2 * i + 1];
    rows.push_back({events[2 * i], w >> 32, (w >> 16) & 0xffffu, (w >> 8) & 0xffu, w & 0xffu});
  }
  nlohmann::json doc = {{"component", component},
                        {"rank", rank},
                        {"clock", "globaltimer_ns"},
                        {"event_names", eventNames},
                        {"fields", {"time_ns", "call", "block", "event", "arg"}},
                        {"events", rows},
                        {"claimed", claimed},
                        {"dropped", claimed - kept}};
  return doc.dump();
}

}  // namespace meshcomm
