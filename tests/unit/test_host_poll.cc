#include <gtest/gtest.h>

#include <chrono>

#include "meshcomm/host_poll.hpp"

namespace meshcomm {
namespace {

using std::chrono::microseconds;

// Past the hot window every round sleeps, the nap doubling from 1 us up to maxNap: five rounds with maxNap 8
// us sleep at least 1 + 2 + 4 + 8 + 8 us (a sleep never ends early).
TEST(HostPoll, NapsDoubleUpToTheMaximumAfterTheHotWindow) {
  HostPoll poll(microseconds(0), microseconds(8));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(poll.pause()) << "round " << i << " is past the hot window";
  EXPECT_GE(poll.elapsed(), microseconds(23));
}

// Inside the hot window a round is one pause instruction: 100000 rounds take milliseconds, where as many naps
// would take seconds (each lasts at least Linux's 50 us timer slack; the bound leaves room for a loaded
// host).
TEST(HostPoll, SpinsWithoutSleepingInsideTheHotWindow) {
  HostPoll poll(std::chrono::seconds(60), microseconds(200));
  int naps = 0;
  for (int i = 0; i < 100000; ++i) naps += poll.pause() ? 1 : 0;
  EXPECT_EQ(naps, 0);
  EXPECT_LT(poll.elapsed(), std::chrono::seconds(1));
}

TEST(HostPoll, ElapsedGrowsFromTheStart) {
  HostPoll poll;
  const auto first = poll.elapsed();
  poll.pause();
  EXPECT_GE(poll.elapsed(), first);
}

}  // namespace
}  // namespace meshcomm
