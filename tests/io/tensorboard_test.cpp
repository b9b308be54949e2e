// TensorBoard events: the CRC against the standard check value, then a file
// written here and read back by the tensorboard package (tensorboard_check.py).
#include "io/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace docmatch::io {
namespace {

TEST(Crc32c, MatchesTheStandardCheckValue) {
  // The CRC catalogue's check value for CRC-32C over "123456789".
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

// Writes 20 steps of two scalars (loss = 1 / (step + 1), lr = step * 1e-4)
// and checks the TFRecord framing: every record's length and data CRCs.
// ctest's Python check runs this with DOCMATCH_TB_DIR set and reads the file
// back with the tensorboard package.
TEST(EventWriter, WritesFramedRecordsTheTensorboardCheckReads) {
  const char* from_env = std::getenv("DOCMATCH_TB_DIR");
  const std::string directory =
      from_env ? from_env : ::testing::TempDir() + "docmatch-tb-" + std::to_string(::getpid());
  std::string path;
  {
    EventWriter writer(directory);
    for (int step = 0; step < 20; ++step) {
      writer.Scalar("train/loss", step, 1.0 / (step + 1));
      writer.Scalar("train/lr", step, step * 1e-4);
    }
    writer.Flush();
    path = writer.path();
  }
  auto masked = [](const char* data, size_t size) {
    const uint32_t crc = Crc32c(data, size);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
  };
  std::ifstream in(path, std::ios::binary);
  int records = 0;
  uint64_t length = 0;
  while (in.read(reinterpret_cast<char*>(&length), 8)) {
    uint32_t length_crc = 0, data_crc = 0;
    in.read(reinterpret_cast<char*>(&length_crc), 4);
    EXPECT_EQ(length_crc, masked(reinterpret_cast<const char*>(&length), 8)) << "record " << records;
    std::string data(length, '\0');
    in.read(data.data(), static_cast<std::streamsize>(length));
    in.read(reinterpret_cast<char*>(&data_crc), 4);
    ASSERT_TRUE(in) << "record " << records << " is truncated";
    EXPECT_EQ(data_crc, masked(data.data(), data.size())) << "record " << records;
    ++records;
  }
  EXPECT_EQ(records, 1 + 40);  // the file_version event, then 40 scalars
  if (!from_env) std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace docmatch::io
