// Process placement and backend choice under a real mpirun.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>

#include "dist/communicator.h"
#include "dist/runtime.h"

namespace docmatch::dist {
namespace {

TEST(Placement, LocalRanksComeFromTheLauncherAndAreDistinct) {
  const Placement p = DiscoverPlacement("cpu");
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(p.rank, rank);
  EXPECT_EQ(p.size, size);
  EXPECT_TRUE(p.device.is_cpu());
  // One node here: local ranks are a permutation of 0..size-1, local size = size.
  EXPECT_EQ(p.local_size, size);
  std::vector<int> all(size);
  MPI_Allgather(&p.local_rank, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::sort(all.begin(), all.end());
  for (int r = 0; r < size; ++r) EXPECT_EQ(all[r], r);
  if (const char* ompi = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) {
    EXPECT_EQ(p.local_rank, std::atoi(ompi));
    EXPECT_EQ(p.local_rank_source, "OMPI_COMM_WORLD_LOCAL_RANK");
  }
  EXPECT_THROW(DiscoverPlacement("tpu"), c10::Error);
  if (!torch::cuda::is_available()) EXPECT_THROW(DiscoverPlacement("cuda"), c10::Error);
}

TEST(Backend, AutoPicksMpiOnCpuAndNcclNeedsCuda) {
  EXPECT_EQ(MakeCommunicator("auto", torch::kCPU)->backend(), "mpi");
  EXPECT_EQ(MakeCommunicator("mpi", torch::kCPU)->backend(), "mpi");
  EXPECT_THROW(MakeCommunicator("nccl", torch::kCPU), c10::Error);
  EXPECT_THROW(MakeCommunicator("gloo", torch::kCPU), c10::Error);
}

}  // namespace
}  // namespace docmatch::dist
