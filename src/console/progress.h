// A progress bar for long work: count, rate, a second rate (e.g. tokens/s),
// and ETA when the total is known.
//
// On a terminal it redraws one line (at most 5 times a second); when stderr is
// a file or a pipe (CI, Slurm logs) it prints a plain line every 10 seconds
// instead, so logs stay readable. Thread-safe: workers may Add() concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace docmatch::console {

class ProgressBar {
 public:
  // `total` < 0: unknown (no percentage, no ETA).
  ProgressBar(std::string label, int64_t total, std::string unit = "docs", std::string extra_unit = "",
              bool enabled = true);
  ~ProgressBar();

  void Add(int64_t count, int64_t extra = 0);
  // Work a resumed run did before this process: counts toward the bar and
  // the ETA's remainder, not toward the rates.
  void Resume(int64_t done);
  // Free text shown after the rates, e.g. "loss 2.31  41.2K tokens/s".
  void SetStatus(std::string status);
  // Draws the final state and ends the line.
  void Finish();

  bool finished() const { return finished_; }
  double seconds() const;
  int64_t count() const { return count_; }

 private:
  void Draw(bool final);

  std::string label_, unit_, extra_unit_, status_;
  int64_t total_;
  bool enabled_, interactive_;
  bool finished_ = false;
  int64_t count_ = 0, extra_ = 0, resumed_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::mutex mutex_;
};

// A rate for the bar: "12.3K", "45", "0.07" (two decimals below 10, so a
// slow step never reads as 0/s).
std::string HumanRate(double per_second);

// "12.3K", "4.56M": short human numbers for logs.
std::string HumanCount(double value);
// "1h02m", "03:07": durations for ETAs.
std::string HumanDuration(double seconds);

}  // namespace docmatch::console
