// main() for the multi-rank GoogleTest binaries: MPI up, tests, MPI down.
// ctest runs them under `mpirun --oversubscribe -np N`; only rank 0 prints
// the test log, every rank's failure still fails the run (exit code).
#include <glog/logging.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include "dist/runtime.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  google::InitGoogleLogging(argv[0]);
  docmatch::dist::MpiRuntime mpi(&argc, &argv);
  docmatch::dist::SetUpRankLogging(mpi.rank());
  if (mpi.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  // Any rank's failure fails every rank, so mpirun's exit code tells.
  int any = failed;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (mpi.rank() == 0 && any && !failed) std::cerr << "[dist] a test failed on another rank" << std::endl;
  return any;
}
