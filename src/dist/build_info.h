// What this build was compiled with and what this machine offers it: libtorch
// version, CUDA and NCCL (compiled in? devices present?), the MPI library.
// `docmatch info` prints it; logs start with it so a run says what it ran on.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace docmatch::dist {

struct BuildInfo {
  std::string docmatch_version;  // "0.1.0"
  std::string torch_version;     // "2.11.0"
  bool cuda_compiled = false;    // libtorch and docmatch built with CUDA
  bool nccl_compiled = false;    // docmatch's NCCL backend compiled in
  std::string nccl_version;      // "2.28.9" or "" when not compiled
  int cuda_devices = 0;          // visible GPUs (0 on CPU machines)
  std::string mpi_library;       // first line of MPI_Get_library_version

  nlohmann::json ToJson() const;
};

BuildInfo CurrentBuildInfo();

}  // namespace docmatch::dist
