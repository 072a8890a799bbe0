// How meshcomm-bench and meshcomm-tune time one configuration: several timed repeats, each aligned by the
// caller (a bootstrap barrier), host steady clock from the first launch to the stream's completion divided
// by the iterations, and the median kept. One timed launch let a one-off stall decide (a host hiccup of
// ~1 ms, or a rank leaving the TCP barrier late, while the others spin in their kernels: meshcomm-tune saw
// 21-551 us rows that no repeat reproduced).
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace meshcomm::tools {

// Repeats per timing: 9 where one timing is short enough for a host stall to matter (graphs, or eager
// iterations up to 16 MiB), 5 for larger eager ones.
constexpr unsigned long long kManyRepeatsMaxBytes = 16ull << 20;
inline int timedRepeats(unsigned long long bytes, bool graph) {
  return graph || bytes <= kManyRepeatsMaxBytes ? 9 : 5;
}

// Median over `repeats` of: align(); run(), which launches `iters` iterations and waits for them; in us per
// iteration. Each repeat's time goes to `each` when given (verbose output).
template <class Align, class Run>
double medianTimedUs(int repeats, int iters, Align&& align, Run&& run, std::vector<double>* each = nullptr) {
  std::vector<double> us;
  us.reserve(static_cast<size_t>(repeats));
  for (int r = 0; r < repeats; ++r) {
    align();
    const auto t0 = std::chrono::steady_clock::now();
    run();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                 iters);
  }
  if (each) *each = us;
  std::nth_element(us.begin(), us.begin() + repeats / 2, us.end());
  return us[static_cast<size_t>(repeats / 2)];
}

}  // namespace meshcomm::tools
