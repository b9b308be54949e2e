// Collecting what `docmatch info` prints: torch, CUDA, NCCL and MPI as compiled
// in and as found on this machine (build_info.h).
#include "dist/build_info.h"

#include <mpi.h>
#include <torch/torch.h>
#include <torch/version.h>

#ifdef DOCMATCH_HAS_NCCL
#include <nccl.h>
#endif

#ifndef DOCMATCH_VERSION
#define DOCMATCH_VERSION "0.1.0"
#endif

namespace docmatch::dist {

nlohmann::json BuildInfo::ToJson() const {
  return {{"docmatch", docmatch_version},
          {"torch", torch_version},
          {"cuda_compiled", cuda_compiled},
          {"nccl_compiled", nccl_compiled},
          {"nccl", nccl_version},
          {"cuda_devices", cuda_devices},
          {"mpi", mpi_library}};
}

BuildInfo CurrentBuildInfo() {
  BuildInfo info;
  info.docmatch_version = DOCMATCH_VERSION;
  info.torch_version = TORCH_VERSION;
#ifdef DOCMATCH_HAS_CUDA
  info.cuda_compiled = true;
#endif
  info.cuda_devices = static_cast<int>(torch::cuda::device_count());
#ifdef DOCMATCH_HAS_NCCL
  info.nccl_compiled = true;
  int version = 0;
  if (ncclGetVersion(&version) == ncclSuccess) {
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    info.nccl_version = std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
                        std::to_string(version % 100);
  }
#endif
  char library[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(library, &length);
  std::string text(library, length);
  info.mpi_library = text.substr(0, text.find_first_of("\n,"));
  return info;
}

}  // namespace docmatch::dist
