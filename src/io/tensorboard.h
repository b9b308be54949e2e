// TensorBoard event files, written directly: the format is public (TFRecord
// framing of tensorflow.Event protocol buffers), and a scalar event is a few
// dozen bytes of protobuf wire format, so docmatch needs neither TensorFlow
// nor protoc. The TensorBoard package reads the files back (a test checks).
//
// Record:  uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
// Event:   1 wall_time (double) | 2 step (int64) | 3 file_version (string) | 5 summary
// Summary: 1 value (repeated) -> Value: 1 tag (string) | 2 simple_value (float)
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace docmatch::io {

// CRC-32C (Castagnoli), as TFRecord frames use it; Debian 12 packages no
// C++ library for it.
uint32_t Crc32c(const char* data, size_t size);

// Rewrites every event file in `directory` keeping only the events of steps
// up to `step` (and a file's version record), so that a run resumed from
// `step` does not show the steps after it twice. A torn last record (a crash
// mid-write) goes too.
void TrimEvents(const std::string& directory, int64_t step);

class EventWriter {
 public:
  // Creates <directory>/events.out.tfevents.<unix time>.<host>.<pid>.
  explicit EventWriter(const std::string& directory);
  void Scalar(const std::string& tag, int64_t step, double value);
  void Flush();
  const std::string& path() const { return path_; }

 private:
  void WriteEvent(const std::string& event);

  std::string path_;
  std::ofstream out_;
};

}  // namespace docmatch::io
