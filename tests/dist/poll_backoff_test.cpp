// How waits poll (dist/peer_probe.h): a rank's own wait spins only at first;
// NCCL's watchdog, which nothing waits on, never spins.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "dist/peer_probe.h"

namespace docmatch::dist {
namespace {

using Clock = std::chrono::steady_clock;

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

TEST(PollBackoff, AWaitSpinsForItsFirstMillisecondsOnly) {
  PollBackoff backoff;
  EXPECT_TRUE(backoff.hot());
  std::this_thread::sleep_for(std::chrono::milliseconds(6));
  EXPECT_FALSE(backoff.hot());
}

TEST(PollBackoff, APatientWaitNeverSpinsAndPollsAtMostEveryTenMilliseconds) {
  PollBackoff patient = PollBackoff::Patient();
  EXPECT_FALSE(patient.hot());
  // Its sleeps double from 10 us: the first ten sleep 10 + 20 + ... + 5,120
  // us = 10.23 ms at least (a sleep never ends early).
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < 10; ++i) patient.Pause();
  EXPECT_GE(MillisecondsSince(start), 10.23);
  // Then 10 ms each, no longer: over 60 ms from the start, at most 10 + 5
  // polls (fewer on a busy machine, where sleeps overrun).
  int polls = 10;
  while (MillisecondsSince(start) < 60.0) {
    patient.Pause();
    ++polls;
  }
  EXPECT_LE(polls, 15);
  EXPECT_FALSE(patient.hot());
}

}  // namespace
}  // namespace docmatch::dist
