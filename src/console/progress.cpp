// ProgressBar's drawing: a redrawn line on a terminal, a plain line every 10 s
// in logs; HumanCount / HumanDuration for the numbers it and the reports print.
#include "console/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace docmatch::console {

std::string HumanCount(double value) {
  char text[32];
  const char* suffixes[] = {"", "K", "M", "G", "T"};
  int s = 0;
  while (std::fabs(value) >= 1000.0 && s < 4) {
    value /= 1000.0;
    ++s;
  }
  std::snprintf(text, sizeof(text), s == 0 ? "%.0f%s" : "%.2f%s", value, suffixes[s]);
  return text;
}

std::string HumanRate(double per_second) {
  if (!std::isfinite(per_second) || per_second <= 0) return "--";
  if (per_second >= 10) return HumanCount(per_second);
  char text[32];
  std::snprintf(text, sizeof(text), per_second >= 0.01 ? "%.2f" : "%.1e", per_second);
  return text;
}

std::string HumanDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const long total = std::lround(seconds);
  char text[32];
  if (total >= 3600) {
    std::snprintf(text, sizeof(text), "%ldh%02ldm", total / 3600, (total % 3600) / 60);
  } else {
    std::snprintf(text, sizeof(text), "%02ld:%02ld", total / 60, total % 60);
  }
  return text;
}

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit, std::string extra_unit, bool enabled)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      extra_unit_(std::move(extra_unit)),
      total_(total),
      enabled_(enabled),
      interactive_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() { Finish(); }

double ProgressBar::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressBar::Add(int64_t count, int64_t extra) {
  std::lock_guard<std::mutex> lock(mutex_);
  count_ += count;
  extra_ += extra;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (since >= (interactive_ ? 0.2 : 10.0)) {
    last_draw_ = now;
    Draw(false);
  }
}

void ProgressBar::Resume(int64_t done) {
  std::lock_guard<std::mutex> lock(mutex_);
  count_ += done;
  resumed_ += done;
}

void ProgressBar::SetStatus(std::string status) {
  std::lock_guard<std::mutex> lock(mutex_);
  status_ = std::move(status);
}

void ProgressBar::Finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  finished_ = true;
  Draw(true);
}

void ProgressBar::Draw(bool final) {
  if (!enabled_) return;
  const double elapsed = std::max(seconds(), 1e-9);
  // Rates count only this process's work: a resumed run's earlier steps
  // (Resume) took no time here.
  const double rate = static_cast<double>(count_ - resumed_) / elapsed;
  std::string line = label_ + " ";
  if (total_ > 0) {
    constexpr int kWidth = 24;
    const double fraction = std::min(1.0, static_cast<double>(count_) / total_);
    const int filled = static_cast<int>(fraction * kWidth);
    line += "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "] ";
    char pct[16];
    std::snprintf(pct, sizeof(pct), "%3.0f%% ", 100.0 * fraction);
    line += pct + std::to_string(count_) + "/" + std::to_string(total_) + " " + unit_;
  } else {
    line += std::to_string(count_) + " " + unit_;
  }
  line += "  " + HumanRate(rate) + " " + unit_ + "/s";
  if (!extra_unit_.empty()) line += "  " + HumanRate(extra_ / elapsed) + " " + extra_unit_ + "/s";
  if (!status_.empty()) line += "  " + status_;
  if (final) {
    line += "  in " + HumanDuration(elapsed);
  } else if (total_ > 0 && rate > 0) {
    line += "  ETA " + HumanDuration((total_ - count_) / rate);
  }
  if (interactive_) {
    std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

}  // namespace docmatch::console
