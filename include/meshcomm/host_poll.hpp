// HostPoll: how a host thread waits for a condition that the GPU (or another thread) sets, e.g. a word in
// host-mapped memory or a CUDA event. For the first `hot` of the wait every round spins with one pause
// instruction; after that every round sleeps, the nap doubling from 1 us up to `maxNap`. Spinning first is
// what keeps short waits short: a sleep lasts at least the thread's timer slack (50 us by default on Linux),
// so a condition that turns true a few microseconds into the wait would be seen tens of microseconds late.
// The caller tests its condition, its deadline and its errors between rounds:
//
//   HostPoll poll;
//   while (!ready()) { checkErrors(); if (poll.elapsed() > timeout) fail(); poll.pause(); }
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace meshcomm {

// One spin-wait round's hint to the core (x86 pause, arm64 yield): a polling thread yields the pipeline to
// its sibling hyperthread and leaves the spin loop quickly once the polled word changes.
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

class HostPoll {
 public:
  using Clock = std::chrono::steady_clock;

  explicit HostPoll(std::chrono::microseconds hot = std::chrono::microseconds(1000),
                    std::chrono::microseconds maxNap = std::chrono::microseconds(200))
      : start_(Clock::now()), hot_(hot), maxNap_(maxNap) {}

  // One unsuccessful round: a pause instruction inside the hot window, a nap after it. True when it napped.
  bool pause() {
    if (Clock::now() - start_ < hot_) {
      cpuRelax();
      return false;
    }
    std::this_thread::sleep_for(nap_);
    nap_ = std::min(nap_ * 2, maxNap_);
    return true;
  }

  // Time since the wait began.
  Clock::duration elapsed() const { return Clock::now() - start_; }

 private:
  Clock::time_point start_;
  std::chrono::microseconds hot_;
  std::chrono::microseconds maxNap_;
  std::chrono::microseconds nap_{1};
};

}  // namespace meshcomm
