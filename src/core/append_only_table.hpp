// A table that one writer appends to while one reader indexes it concurrently, without locks on the read
// path: entries live in fixed chunks that never move, and the size is published with release after the
// entry is constructed. Used for the proxy's channels and memories, which may be added while it runs.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <utility>

namespace meshcomm::internal {

template <typename T, size_t kMaxEntries, size_t kChunkEntries = 1024>
class AppendOnlyTable {
  static_assert(kMaxEntries % kChunkEntries == 0, "kMaxEntries must be a multiple of kChunkEntries");

 public:
  static constexpr size_t capacity() { return kMaxEntries; }

  // Writer only (callers serialise writers). Returns the new entry's index. Precondition: size() <
  // capacity().
  size_t append(T value) {
    const size_t i = size_.load(std::memory_order_relaxed);
    auto& chunk = chunks_[i / kChunkEntries];
    if (!chunk) chunk = std::make_unique<std::array<T, kChunkEntries>>();
    (*chunk)[i % kChunkEntries] = std::move(value);
    size_.store(i + 1, std::memory_order_release);  // publishes the entry to readers
    return i;
  }

  // Any thread: entries [0, size()) are fully constructed and never change.
  size_t size() const { return size_.load(std::memory_order_acquire); }
  const T& operator[](size_t i) const { return (*chunks_[i / kChunkEntries])[i % kChunkEntries]; }

 private:
  std::array<std::unique_ptr<std::array<T, kChunkEntries>>, kMaxEntries / kChunkEntries> chunks_{};
  std::atomic<size_t> size_{0};
};

}  // namespace meshcomm::internal
