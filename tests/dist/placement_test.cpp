// Process placement and backend choice under a real mpirun.
#include <glog/logging.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "console/error.h"
#include "dist/communicator.h"
#include "dist/control_plane.h"
#include "dist/process_group.h"
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
  // User mistakes are plain exceptions with one-line messages (no c10 backtrace).
  const auto message = [](const std::string& device) {
    try {
      DiscoverPlacement(device);
    } catch (const docmatch::Error& e) {
      return std::string(e.what());
    }
    return std::string("no docmatch::Error");
  };
  EXPECT_EQ(message("tpu"), "[dist] unknown device 'tpu' (cpu, cuda, auto)");
  if (!torch::cuda::is_available()) {
    EXPECT_EQ(message("cuda"), "[dist] --device cuda, but no CUDA device is visible");
  }
}

TEST(RankLogging, EveryRankCanLogToItsOwnFile) {
  int rank = 0, id = static_cast<int>(::getpid());
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Bcast(&id, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const std::string dir = std::filesystem::temp_directory_path().string() + "/docmatch-logs-" + std::to_string(id);
  SetUpRankLogging(rank, dir);
  LOG(INFO) << "[test] info from rank " << rank;
  LOG(WARNING) << "[test] warning from rank " << rank;
  google::FlushLogFiles(google::GLOG_INFO);
  SetUpRankLogging(rank);  // back to no files
  MPI_Barrier(MPI_COMM_WORLD);
  // Exactly one file per rank, named for it, holding both of its messages.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-" + std::to_string(rank) + ".log.", 0) != 0) continue;
    ++files;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("[test] info from rank " + std::to_string(rank)), std::string::npos) << text;
    EXPECT_NE(text.find("[test] warning from rank " + std::to_string(rank)), std::string::npos) << text;
  }
  EXPECT_EQ(files, 1);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::filesystem::remove_all(dir);
}

// The backend is decided by every rank together (issue 37, item 3): a rank
// that cannot use NCCL (srun --gpus-per-task=1 showed local rank 0 a GPU it
// thought shared) makes every rank choose MPI, instead of entering
// MPI_Comm_dup alone while the others wait for NCCL's id.
TEST(Backend, EveryRankAgreesOnOneBackend) {
  ControlPlane control;
  EXPECT_EQ(AgreeOnBackend(Backend::kAuto, NcclPossible(torch::kCPU, false), control), Backend::kMpi);
  EXPECT_EQ(AgreeOnBackend(Backend::kMpi, true, control), Backend::kMpi);
  // Rank 0 alone cannot: all choose MPI, rank 0 included.
  EXPECT_EQ(AgreeOnBackend(Backend::kAuto, control.rank() != 0, control), Backend::kMpi);
  // The last rank alone cannot: the same.
  EXPECT_EQ(AgreeOnBackend(Backend::kAuto, control.rank() != control.size() - 1, control), Backend::kMpi);
#ifdef DOCMATCH_HAS_NCCL
  EXPECT_EQ(AgreeOnBackend(Backend::kAuto, true, control), Backend::kNccl);
  // --backend nccl where one rank cannot: every rank refuses, none hangs.
  EXPECT_THROW(AgreeOnBackend(Backend::kNccl, control.rank() != 0, control), docmatch::Error);
#else
  EXPECT_EQ(AgreeOnBackend(Backend::kAuto, true, control), Backend::kMpi);
#endif
  // --backend is parsed once, at the command line: a value it does not know
  // is named there, with the values it knows.
  EXPECT_EQ(ParseBackend("nccl"), Backend::kNccl);
  EXPECT_EQ(Name(ParseBackend("auto")), std::string("auto"));
  try {
    ParseBackend("gloo");
    ADD_FAILURE() << "gloo was taken for a backend";
  } catch (const docmatch::Error& e) {
    EXPECT_EQ(e.stage(), "dist");
    EXPECT_NE(e.sentence().find("auto, mpi or nccl, not 'gloo'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(MakeCommunicator(Backend::kMpi, torch::kCPU)->backend(), Backend::kMpi);
  EXPECT_THROW(MakeCommunicator(Backend::kNccl, torch::kCPU), docmatch::Error);
  EXPECT_THROW(MakeCommunicator(Backend::kAuto, torch::kCPU), docmatch::Error);
  EXPECT_FALSE(NcclPossible(torch::kCPU, false));
}

// Issue 61: ranks that share a GPU run NCCL when each has a host identity
// of its own (NCCL_HOSTID), set per rank by DOCMATCH_NCCL_HOST_PER_RANK=1;
// without distinct ids the rule stands (MPI for shared GPUs). The variables
// are restored after.
class SavedEnvironment {
 public:
  explicit SavedEnvironment(std::vector<std::string> names) : names_(std::move(names)) {
    for (const std::string& name : names_) {
      const char* value = std::getenv(name.c_str());
      values_.push_back(value ? std::optional<std::string>(value) : std::nullopt);
    }
  }
  ~SavedEnvironment() {
    for (size_t i = 0; i < names_.size(); ++i) {
      if (values_[i]) {
        ::setenv(names_[i].c_str(), values_[i]->c_str(), 1);
      } else {
        ::unsetenv(names_[i].c_str());
      }
    }
  }

 private:
  std::vector<std::string> names_;
  std::vector<std::optional<std::string>> values_;
};

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "(unset)";
}

TEST(Backend, EachRankItsOwnNcclHostMakesSharedGpusNcclsHosts) {
  const SavedEnvironment saved({"NCCL_HOSTID", "NCCL_SOCKET_IFNAME", kNcclHostPerRank});
  ControlPlane control;
  const int rank = control.rank(), size = control.size();
  ::unsetenv("NCCL_HOSTID");
  ::unsetenv("NCCL_SOCKET_IFNAME");
  ::unsetenv(kNcclHostPerRank);
  EXPECT_FALSE(GiveEachRankItsOwnNcclHost(rank));  // not asked
  EXPECT_EQ(Env("NCCL_HOSTID"), "(unset)");
  EXPECT_FALSE(DistinctNcclHosts(control));  // nobody has one
  ::setenv(kNcclHostPerRank, "1", 1);
  EXPECT_TRUE(GiveEachRankItsOwnNcclHost(rank));
  EXPECT_EQ(Env("NCCL_HOSTID"), "docmatch-rank-" + std::to_string(rank));
  EXPECT_EQ(Env("NCCL_SOCKET_IFNAME"), "lo");
  EXPECT_TRUE(DistinctNcclHosts(control));
  // A user's own ids and interface stand.
  ::setenv("NCCL_HOSTID", "one-machine", 1);
  ::setenv("NCCL_SOCKET_IFNAME", "eth9", 1);
  EXPECT_FALSE(GiveEachRankItsOwnNcclHost(rank));
  EXPECT_EQ(Env("NCCL_HOSTID"), "one-machine");
  EXPECT_EQ(Env("NCCL_SOCKET_IFNAME"), "eth9");
  EXPECT_EQ(DistinctNcclHosts(control), size == 1);  // one id on every rank: one host
  // The last rank without an id: not every rank is its own host.
  if (rank == size - 1) {
    ::unsetenv("NCCL_HOSTID");
  } else {
    ::setenv("NCCL_HOSTID", ("h" + std::to_string(rank)).c_str(), 1);
  }
  EXPECT_FALSE(DistinctNcclHosts(control));
  // The rule itself, and the agreement: every rank decides alike.
  const torch::Device gpu(torch::kCUDA, 0);
  EXPECT_FALSE(NcclPossible(torch::kCPU, /*gpus_shared=*/true, /*distinct_hosts=*/true));
#ifdef DOCMATCH_HAS_NCCL
  EXPECT_FALSE(NcclPossible(gpu, true, false));
  EXPECT_TRUE(NcclPossible(gpu, true, true));
  EXPECT_TRUE(NcclPossible(gpu, false, false));
  EXPECT_EQ(AgreeOnBackend(Backend::kAuto, NcclPossible(gpu, true, /*distinct_hosts=*/rank != 0), control),
            Backend::kMpi);
  EXPECT_EQ(AgreeOnBackend(Backend::kAuto, NcclPossible(gpu, true, true), control), Backend::kNccl);
#else
  EXPECT_FALSE(NcclPossible(gpu, true, true));
#endif
}

// The launch wiring in the process group itself: with the switch set, every
// rank has its own id after FromLaunch (on CPU the backend stays MPI).
TEST(ProcessGroupFromLaunch, TheSwitchGivesEveryRankItsOwnNcclHost) {
  const SavedEnvironment saved({"NCCL_HOSTID", "NCCL_SOCKET_IFNAME", kNcclHostPerRank});
  ::unsetenv("NCCL_HOSTID");
  ::setenv(kNcclHostPerRank, "1", 1);
  const std::unique_ptr<ProcessGroup> group =
      ProcessGroup::FromLaunch("cpu", Backend::kAuto, std::chrono::milliseconds(30000));
  EXPECT_EQ(Env("NCCL_HOSTID"), "docmatch-rank-" + std::to_string(group->rank()));
  EXPECT_TRUE(DistinctNcclHosts(group->control()));
  EXPECT_EQ(group->data().backend(), Backend::kMpi);
}

// Two ranks share a GPU exactly when two identities on the node are equal.
TEST(Placement, SharedGpusAreFoundByIdentity) {
  EXPECT_FALSE(AnyShared({}));
  EXPECT_FALSE(AnyShared({"gpu:a", "gpu:b", "gpu:c"}));
  EXPECT_TRUE(AnyShared({"gpu:a", "gpu:b", "gpu:a"}));
}

// The process group from a launch on CPU: the device, both planes over every
// rank, and the data plane's MPI backend.
TEST(ProcessGroupFromLaunch, CpuRanksGetMpiAndBothPlanes) {
  const std::unique_ptr<ProcessGroup> group =
      ProcessGroup::FromLaunch("cpu", Backend::kAuto, std::chrono::milliseconds(30000));
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(group->rank(), rank);
  EXPECT_EQ(group->size(), size);
  EXPECT_TRUE(group->device().is_cpu());
  EXPECT_EQ(group->data().backend(), Backend::kMpi);
  EXPECT_EQ(group->data().device(), group->device());
  EXPECT_EQ(group->data().size(), size);
  EXPECT_EQ(group->control().AllGather(rank).back(), size - 1);
}

}  // namespace
}  // namespace docmatch::dist
