// The host side of a device event trace (include/meshcomm/device/trace.hpp, docs/trace.md): the device buffer
// a component's kernels record into, and the file it becomes. A component (the plan executor, meshcomm.ep)
// holds one per rank when MESHCOMM_TRACE is set and passes view() to its launches.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshcomm/device/trace.hpp"
#include "meshcomm/gpu_utils.hpp"

namespace meshcomm {

class DeviceTraceBuffer {
 public:
  // Null unless MESHCOMM_TRACE is set. `eventNames[code]` names the component's event codes. Allocates
  // MESHCOMM_TRACE_EVENTS events on the current device; the file is
  // <MESHCOMM_TRACE>.<component>.<k>.rank<r>.json for the k-th buffer of `component` made in this process.
  static std::unique_ptr<DeviceTraceBuffer> fromEnvironment(const std::string& component, int rank,
                                                            std::vector<std::string> eventNames);

  DeviceTraceBuffer(std::string path, std::string component, int rank, std::vector<std::string> eventNames,
                    uint32_t capacity);
  // Writes the file if write() has not (errors are logged, never thrown).
  ~DeviceTraceBuffer();
  DeviceTraceBuffer(const DeviceTraceBuffer&) = delete;
  DeviceTraceBuffer& operator=(const DeviceTraceBuffer&) = delete;

  DeviceTrace view() const;
  // Synchronizes the buffer's device, copies the events and writes the file; throws on failure.
  void write();

 private:
  std::string path_, component_;
  int rank_;
  std::vector<std::string> eventNames_;
  uint32_t capacity_;
  int device_ = -1;   // the buffer's device (current at construction)
  GpuBuffer buffer_;  // [capacity][2] u64 events, then the u64 cursor
  bool written_ = false;
};

// The trace file's JSON text (component, rank, event names, the events in claim order as
// [time_ns, call, block, event, arg], claimed and dropped counts). `events` holds min(claimed, capacity).
std::string deviceTraceJson(const std::string& component, int rank,
                            const std::vector<std::string>& eventNames, const uint64_t* events,
                            uint64_t claimed, uint32_t capacity);

}  // namespace meshcomm
