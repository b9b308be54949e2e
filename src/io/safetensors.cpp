// safetensors written and read byte for byte by its public layout, with every
// header and offset checked before use (safetensors.h).
#include "io/safetensors.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "console/error.h"
#include "files/file_writer.h"

namespace docmatch::io {
namespace {

const std::map<torch::ScalarType, std::string>& DtypeNames() {
  static const std::map<torch::ScalarType, std::string> names = {
      {torch::kFloat64, "F64"},   {torch::kFloat32, "F32"}, {torch::kFloat16, "F16"},
      {torch::kBFloat16, "BF16"}, {torch::kInt64, "I64"},   {torch::kInt32, "I32"},
      {torch::kInt8, "I8"},       {torch::kUInt8, "U8"},    {torch::kBool, "BOOL"}};
  return names;
}

[[noreturn]] void Fail(const std::string& path, const std::string& what) {
  throw Error("export", "'" + path + "' is not a valid safetensors file: " + what);
}

}  // namespace

void WriteSafetensors(const std::map<std::string, torch::Tensor>& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  int64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {  // std::map: sorted names, a stable layout
    const auto dtype = DtypeNames().find(tensor.scalar_type());
    DOCMATCH_CHECK(dtype != DtypeNames().end(), "export", "tensor ", name, ": dtype ", tensor.scalar_type(),
                   " has no safetensors name");
    torch::Tensor cpu = tensor.detach().to(torch::kCPU).contiguous();
    const int64_t bytes = cpu.numel() * cpu.element_size();
    header[name] = {{"dtype", dtype->second}, {"shape", cpu.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(cpu);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string temporary = path + ".tmp";
  files::SaveThrough(temporary, [&](const files::ByteWriter& write) {
    const uint64_t length = text.size();
    write(&length, 8);
    write(text.data(), text.size());
    for (const torch::Tensor& t : data) write(t.data_ptr(), t.numel() * t.element_size());
  });
  std::filesystem::rename(temporary, path);
}

Safetensors ReadSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("export", "cannot open '" + path + "'");
  const auto file_size = static_cast<uint64_t>(std::filesystem::file_size(path));
  uint64_t length = 0;
  if (!in.read(reinterpret_cast<char*>(&length), 8) || length > file_size - 8) Fail(path, "bad header length");
  std::string text(length, '\0');
  in.read(text.data(), static_cast<std::streamsize>(length));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    Fail(path, std::string("header is not JSON (") + e.what() + ")");
  }
  const uint64_t data_size = file_size - 8 - length;
  std::string bytes(data_size, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(data_size));
  Safetensors out;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      for (const auto& [key, value] : entry.items()) out.metadata[key] = value.get<std::string>();
      continue;
    }
    torch::ScalarType type = torch::kFloat32;
    bool known = false;
    for (const auto& [t, n] : DtypeNames()) {
      if (n == entry.at("dtype").get<std::string>()) type = t, known = true;
    }
    if (!known) Fail(path, "tensor " + name + " has unsupported dtype " + entry.at("dtype").dump());
    const std::vector<int64_t> shape = entry.at("shape").get<std::vector<int64_t>>();
    const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
    torch::Tensor t = torch::empty(shape, torch::TensorOptions(type));
    const uint64_t expected = static_cast<uint64_t>(t.numel() * t.element_size());
    if (offsets.size() != 2 || offsets[1] < offsets[0] || offsets[1] > data_size ||
        offsets[1] - offsets[0] != expected) {
      Fail(path, "tensor " + name + " has data offsets that do not fit its shape or the file");
    }
    std::memcpy(t.data_ptr(), bytes.data() + offsets[0], expected);
    out.tensors[name] = t;
  }
  return out;
}

}  // namespace docmatch::io
