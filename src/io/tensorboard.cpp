// TensorBoard's record framing, CRC32C and the few protobuf fields of a scalar
// event, written by hand so that no protobuf dependency is needed (tensorboard.h).
#include "io/tensorboard.h"

#include "console/error.h"
#include "files/file_writer.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <vector>

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

// Reads a varint at data[*at]; false past `end` or on an over-long one.
bool ReadVarint(const std::string& data, size_t* at, uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 64 && *at < data.size(); shift += 7) {
    const auto byte = static_cast<uint8_t>(data[(*at)++]);
    *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// An Event's step (field 2; 0 when absent), or nullopt for malformed bytes.
std::optional<int64_t> EventStep(const std::string& event) {
  int64_t step = 0;
  for (size_t at = 0; at < event.size();) {
    uint64_t key = 0, value = 0;
    if (!ReadVarint(event, &at, &key)) return std::nullopt;
    switch (key & 7) {
      case 0:
        if (!ReadVarint(event, &at, &value)) return std::nullopt;
        if ((key >> 3) == 2) step = static_cast<int64_t>(value);
        break;
      case 1:
        at += 8;
        break;
      case 2:
        if (!ReadVarint(event, &at, &value)) return std::nullopt;
        at += value;
        break;
      case 5:
        at += 4;
        break;
      default:
        return std::nullopt;
    }
    if (at > event.size()) return std::nullopt;
  }
  return step;
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

void TrimEvents(const std::string& directory, int64_t step) {
  if (!std::filesystem::is_directory(directory)) return;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("events.out.tfevents.", 0) == 0 && entry.path().extension() != ".tmp" && entry.is_regular_file()) {
      files.push_back(entry.path());
    }
  }
  for (const std::filesystem::path& file : files) {
    std::string data;
    {
      std::ifstream in(file, std::ios::binary);
      data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    std::string kept;
    bool dropped = false;
    size_t at = 0;
    while (at + 12 <= data.size()) {
      uint64_t length = 0;
      uint32_t length_crc = 0, data_crc = 0;
      std::memcpy(&length, data.data() + at, 8);
      std::memcpy(&length_crc, data.data() + at + 8, 4);
      if (length_crc != MaskedCrc(data.data() + at, 8) || at + 16 + length > data.size()) break;
      std::memcpy(&data_crc, data.data() + at + 12 + length, 4);
      const std::string event = data.substr(at + 12, length);
      if (data_crc != MaskedCrc(event.data(), event.size())) break;
      const std::optional<int64_t> event_step = EventStep(event);
      if (event_step && *event_step <= step) {
        kept.append(data, at, 16 + length);
      } else {
        dropped = true;
      }
      at += 16 + length;
    }
    dropped = dropped || at != data.size();
    if (!dropped) continue;
    files::ReplaceFile(file.string(), kept);
  }
}

EventWriter::EventWriter(const std::string& directory) {
  std::filesystem::create_directories(directory);
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  path_ = directory + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(Now())) + "." + host + "." +
          std::to_string(getpid());
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) throw Error("train", "cannot write TensorBoard events to '" + path_ + "'");
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

void EventWriter::Flush() {
  out_.flush();
  files::CheckStream(out_, path_);
}

}  // namespace docmatch::io
