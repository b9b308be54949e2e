// Which ops read a tensor's value back to the host while a piece of code
// runs. On a GPU each such read is a host synchronisation: the host waits
// for the device's queue to drain (nonzero() for its count, item() for its
// value, a boolean index through nonzero). They are recorded here on CPU,
// through PyTorch's RecordFunction callbacks, which see every op the
// dispatcher runs, forward and backward, so a test can show on this machine
// that a step's shapes need no value from the device. On CPU a host tensor
// and a "device" one look alike, so every read counts, except reads of a
// packed sequence's batch sizes, which live on the host by contract.
#pragma once

#include <ATen/record_function.h>

#include <string>
#include <vector>

namespace docmatch::model::testing {

class HostReads {
 public:
  HostReads();  // records from here
  ~HostReads();
  HostReads(const HostReads&) = delete;
  HostReads& operator=(const HostReads&) = delete;

  // The reading ops seen so far, by name ("aten::nonzero"), in order.
  std::vector<std::string> seen() const;
  // Every op seen so far, reading or not (to show the recording works).
  int64_t ops() const;

 private:
  at::CallbackHandle handle_;
};

}  // namespace docmatch::model::testing
