// TensorBoard's record framing, CRC32C and the few protobuf fields of a scalar
// event, written by hand so that no protobuf dependency is needed (tensorboard.h).
#include "io/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace docmatch::io {
namespace {

std::array<uint32_t, 256> Crc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
    table[i] = c;
  }
  return table;
}

uint32_t MaskedCrc(const char* data, size_t size) {
  const uint32_t crc = Crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Protocol-buffer wire format, the few shapes an Event needs.
void Varint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}
void Key(int field, int wire_type, std::string* out) { Varint((static_cast<uint64_t>(field) << 3) | wire_type, out); }
template <typename T>
void Fixed(T value, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts (x86-64, aarch64)
  out->append(bytes, sizeof(T));
}
void LengthDelimited(int field, const std::string& bytes, std::string* out) {
  Key(field, 2, out);
  Varint(bytes.size(), out);
  out->append(bytes);
}

double Now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::string EventHeader(double wall_time, int64_t step) {
  std::string event;
  Key(1, 1, &event);
  Fixed<double>(wall_time, &event);
  Key(2, 0, &event);
  Varint(static_cast<uint64_t>(step), &event);
  return event;
}

}  // namespace

uint32_t Crc32c(const char* data, size_t size) {
  static const std::array<uint32_t, 256> table = Crc32cTable();
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ static_cast<uint8_t>(data[i])) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

EventWriter::EventWriter(const std::string& directory) {
  std::filesystem::create_directories(directory);
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  path_ = directory + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(Now())) + "." + host + "." +
          std::to_string(getpid());
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) throw std::runtime_error("[train] cannot write TensorBoard events to '" + path_ + "'");
  std::string event = EventHeader(Now(), 0);
  LengthDelimited(3, "brain.Event:2", &event);
  WriteEvent(event);
}

void EventWriter::Scalar(const std::string& tag, int64_t step, double value) {
  std::string summary_value;
  LengthDelimited(1, tag, &summary_value);
  Key(2, 5, &summary_value);
  Fixed<float>(static_cast<float>(value), &summary_value);
  std::string summary;
  LengthDelimited(1, summary_value, &summary);
  std::string event = EventHeader(Now(), step);
  LengthDelimited(5, summary, &event);
  WriteEvent(event);
}

void EventWriter::WriteEvent(const std::string& event) {
  std::string record;
  Fixed<uint64_t>(event.size(), &record);
  Fixed<uint32_t>(MaskedCrc(record.data(), 8), &record);
  record += event;
  Fixed<uint32_t>(MaskedCrc(event.data(), event.size()), &record);
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
}

void EventWriter::Flush() { out_.flush(); }

}  // namespace docmatch::io
