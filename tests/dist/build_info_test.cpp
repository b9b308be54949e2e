// The torch / CUDA / NCCL build: libtorch links and computes, and GPU paths run
// where a GPU exists (skipped cleanly elsewhere).
#include "dist/build_info.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>

#ifdef DOCMATCH_HAS_NCCL
#include <nccl.h>
#endif

namespace docmatch::dist {
namespace {

TEST(BuildInfo, ReportsTheLinkedLibraries) {
  const BuildInfo info = CurrentBuildInfo();
  EXPECT_EQ(info.torch_version.rfind("2.", 0), 0u) << info.torch_version;
  EXPECT_EQ(info.cuda_devices, static_cast<int>(torch::cuda::device_count()));
  EXPECT_NE(info.mpi_library.find("MPI"), std::string::npos) << info.mpi_library;
#ifdef DOCMATCH_HAS_NCCL
  // The library loaded at run time is the one the header describes.
  const std::string header_version =
      std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH);
  EXPECT_EQ(info.nccl_version, header_version);
#endif
}

TEST(Build, StdFilesystemCallsBindToTheSystemLibstdcxx) {
  // libtorch exports its own std::filesystem; if it interposed ours, this
  // remove_all would crash (it did, before CMakeLists.txt put libstdc++ first).
  const auto root = std::filesystem::temp_directory_path() / ("docmatch-fs-" + std::to_string(::getpid()));
  std::filesystem::create_directories(root / "a" / "b");
  std::error_code error;
  EXPECT_EQ(std::filesystem::remove_all(root, error), 3u);
  EXPECT_FALSE(error);
  EXPECT_FALSE(std::filesystem::exists(root));
}

TEST(Torch, MatrixProductOnCpuMatchesHandComputedValues) {
  // [[1,2],[3,4]] @ [[5,6],[7,8]] = [[19,22],[43,50]]
  const torch::Tensor a = torch::tensor({{1.0, 2.0}, {3.0, 4.0}}, torch::kFloat64);
  const torch::Tensor b = torch::tensor({{5.0, 6.0}, {7.0, 8.0}}, torch::kFloat64);
  const torch::Tensor expected = torch::tensor({{19.0, 22.0}, {43.0, 50.0}}, torch::kFloat64);
  EXPECT_TRUE(torch::equal(torch::matmul(a, b), expected));
}

TEST(Torch, CudaMatchesCpuWhenAGpuIsPresent) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  torch::manual_seed(0);
  const torch::Tensor a = torch::randn({64, 32}, torch::kFloat64);
  const torch::Tensor b = torch::randn({32, 16}, torch::kFloat64);
  const torch::Tensor gpu = torch::matmul(a.cuda(), b.cuda()).cpu();
  EXPECT_TRUE(torch::allclose(gpu, torch::matmul(a, b), /*rtol=*/1e-10, /*atol=*/1e-10));
}

}  // namespace
}  // namespace docmatch::dist
