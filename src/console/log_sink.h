// glog's console output without glog's prefix (severity letter, date, time,
// thread id, file:line): the message alone, "warning: " or "error: " before
// the others. The prefixed lines stay in the per-rank log files
// (--log-dir), where they are for finding what happened when.
#pragma once

#include <glog/logging.h>

namespace docmatch::console {

// From now on, messages of `threshold` and above reach stderr plainly, and
// glog itself writes nothing to stderr. Call again to change the threshold.
void UsePlainConsoleLog(google::LogSeverity threshold);

}  // namespace docmatch::console
