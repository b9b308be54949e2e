// The safetensors format (what `export` writes and what Hugging Face models
// ship): an 8-byte little-endian header length, a JSON header mapping each
// tensor name to {dtype, shape, data_offsets} (plus optional string
// "__metadata__"), padded with spaces to 8-byte alignment, then the raw
// little-endian bytes of every tensor. Simple enough to write and read
// directly; the safetensors Python package reads our files (a test checks).
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>

namespace docmatch::io {

// Contiguous CPU copies are written; F64, F32, F16, BF16, I64, I32, I8, U8, BOOL.
void WriteSafetensors(const std::map<std::string, torch::Tensor>& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {});

struct Safetensors {
  std::map<std::string, torch::Tensor> tensors;
  std::map<std::string, std::string> metadata;
};
// Throws std::runtime_error naming the file when the header or sizes are wrong.
Safetensors ReadSafetensors(const std::string& path);

}  // namespace docmatch::io
