// A glog sink that prints messages to stderr without glog's prefix (log_sink.h).
#include "console/log_sink.h"

#include <atomic>
#include <iostream>
#include <mutex>
#include <string>

namespace docmatch::console {
namespace {

class PlainConsoleSink : public google::LogSink {
 public:
  void send(google::LogSeverity severity, const char*, const char*, int, const struct ::tm*, const char* message,
            size_t length) override {
    if (severity < threshold.load()) return;
    const char* label = severity == google::GLOG_WARNING ? "warning: "
                        : severity >= google::GLOG_ERROR ? "error: "
                                                         : "";
    const std::lock_guard<std::mutex> lock(mutex_);
    std::cerr << label << std::string(message, length) << std::endl;
  }

  std::atomic<int> threshold{google::GLOG_INFO};

 private:
  std::mutex mutex_;
};

}  // namespace

void UsePlainConsoleLog(google::LogSeverity threshold) {
  static PlainConsoleSink* sink = [] {
    auto* s = new PlainConsoleSink;  // lives as long as the process: glog may log until exit
    google::AddLogSink(s);
    return s;
  }();
  sink->threshold = threshold;
  FLAGS_logtostderr = false;
  FLAGS_alsologtostderr = false;
  FLAGS_stderrthreshold = google::NUM_SEVERITIES;  // glog's own prefixed stderr lines: none
}

}  // namespace docmatch::console
