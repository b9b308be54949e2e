// safetensors: round trips in every dtype, refusal of damaged files, and the
// files that tests/io/safetensors_check.py exchanges with the Python package.
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace docmatch::io {
namespace {

// The tensors both sides agree on (safetensors_check.py builds the same).
std::map<std::string, torch::Tensor> Known() {
  return {{"a.weight", torch::arange(12, torch::kFloat32).view({3, 4}) / 7},
          {"b.ids", torch::tensor({-1L, 2L, 3L, -4L}).view({2, 2})},
          {"c.half", torch::tensor({0.5, -2.0, 1024.0}).to(torch::kBFloat16)},
          {"d.flags", torch::tensor({true, false, true})},
          {"e.scalar", torch::tensor(3.25, torch::kFloat64)}};
}

void ExpectKnown(const Safetensors& read) {
  const auto expected = Known();
  ASSERT_EQ(read.tensors.size(), expected.size());
  for (const auto& [name, tensor] : expected) {
    ASSERT_TRUE(read.tensors.count(name)) << name;
    EXPECT_EQ(read.tensors.at(name).scalar_type(), tensor.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(read.tensors.at(name), tensor)) << name;
  }
}

TEST(Safetensors, RoundTripInEveryDtypeWithMetadata) {
  const std::string path = ::testing::TempDir() + "docmatch-st-" + std::to_string(::getpid()) + ".safetensors";
  WriteSafetensors(Known(), path, {{"format", "pt"}, {"model", "smith"}});
  const Safetensors read = ReadSafetensors(path);
  ExpectKnown(read);
  EXPECT_EQ(read.metadata.at("model"), "smith");
  // Damaged: truncated data, then a header length past the end.
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 5);
  EXPECT_THROW(ReadSafetensors(path), std::runtime_error);
  std::ofstream(path, std::ios::binary) << std::string("\xff\xff\xff\xff\x00\x00\x00\x00{}", 10);
  EXPECT_THROW(ReadSafetensors(path), std::runtime_error);
  std::filesystem::remove(path);
}

// Run by safetensors_check.py: write our file for Python to read, and read
// the file Python wrote (disabled in plain runs; the check enables it).
TEST(Safetensors, DISABLED_ExchangesFilesWithThePythonPackage) {
  const char* out = std::getenv("DOCMATCH_ST_OUT");
  const char* in = std::getenv("DOCMATCH_ST_IN");
  if (!out || !in) GTEST_SKIP() << "run through safetensors_check.py";
  WriteSafetensors(Known(), out, {{"written_by", "docmatch"}});
  ExpectKnown(ReadSafetensors(in));
}

}  // namespace
}  // namespace docmatch::io
