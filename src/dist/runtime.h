// The process side of data parallelism: MPI start-up and shut-down, where this
// rank runs (local rank from the launcher, one GPU per local rank), rank-aware
// logging, and the failure rule: an exception on any rank ends the whole job
// with that rank's message (MPI_Abort), never a hang.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace docmatch::dist {

// MPI_Init_thread(MPI_THREAD_MULTIPLE) for the process's lifetime (collectives
// are launched from autograd hooks on other threads). Finalises on exit.
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0, size_ = 1;
};

struct Placement {
  int rank = 0, size = 1;              // world
  int local_rank = 0, local_size = 1;  // this node
  std::string local_rank_source;       // "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID" or "MPI shared-memory split"
  torch::Device device = torch::kCPU;
  bool gpus_shared = false;  // more local ranks than GPUs: ranks share them (MPI backend only)
};

// One process's device (encode, search): "cpu", "cuda" (the first visible
// GPU) or "auto" (cuda when one is visible); an unknown name or cuda without
// a GPU is an error saying so. The device is made current with UseDevice, as
// a rank's is, so these commands run with the same attention kernels.
torch::Device ProcessDevice(const std::string& device);

// `device`: "cpu", "cuda" (one GPU per local rank) or "auto" (cuda when one is
// visible, the default of every command). With `share_gpus` false, more local ranks than GPUs is an error
// that says what to do; with it true (MPI backend), ranks share GPUs round-robin.
// Collective over each node: the ranks compare their GPUs' UUIDs, so
// `gpus_shared` is the same on every rank of a node, whether the launcher
// showed each rank all GPUs or one (srun --gpus-per-task=1).
Placement DiscoverPlacement(const std::string& device, bool share_gpus = false);

// Whether two entries are equal: two ranks on one GPU.
bool AnyShared(const std::vector<std::string>& identities);

// `device` with its index: a CUDA device named without one ("cuda") is the
// current CUDA device, so that two names of one GPU compare equal ("cuda" and
// "cuda:0" do not) and the allocator's per-device calls get a valid index.
torch::Device ResolveDevice(const torch::Device& device);

// Makes `device` the current CUDA device of this process (a no-op on CPU),
// so that no CUDA call of this rank makes a context on GPU 0.
void UseDevice(const torch::Device& device);

// glibc hands every freed block over 128 KiB back to the kernel (munmap, heap
// trimming), so each training step page-faults its activations in again: 45%
// of a smith-tiny CPU step here (bench/NOTES.md). "retain" (the default) keeps
// freed memory in the process for the next step, at the price of a higher
// peak RSS (+28% on smith-paper); DOCMATCH_HOST_ALLOCATOR=system keeps
// glibc's behaviour. Call first thing in main(). Returns the mode it set.
std::string ConfigureHostAllocator();
// On a machine without NVIDIA's driver, PyTorch's profiler (Kineto) logs an
// ERROR each time it starts that it found no GPU (--profile-steps on a CPU):
// its log level is set above ERROR there, unless KINETO_LOG_LEVEL is given.
// Call first thing in main(), before any thread reads the environment.
void QuietProfilerWithoutGpuDriver();
// The mode ConfigureHostAllocator set ("system" if it never ran).
std::string HostAllocator();

// Rank 0 logs INFO and up to stderr, other ranks WARNING and up; with
// `log_dir`, every rank also writes all of its own log to log_dir/rank-<r>.log.
void SetUpRankLogging(int rank, const std::string& log_dir = "");

// What a user is shown of an error: its message, without the C++ backtrace
// libtorch's checks append to what(), unless ShowBacktraces(true) (the
// command line's --verbose) asks for it.
std::string ErrorMessage(const std::exception& error);
void ShowBacktraces(bool on);

// Runs `body`; an exception on this rank is logged with the rank and ends every
// rank of the job (MPI_Abort, exit code 1). A job of one rank prints the
// message alone ("error: ...") and returns 1, without MPI_Abort's banner.
// Returns body's exit code otherwise.
int RunOnAllRanks(const std::function<int()>& body);

}  // namespace docmatch::dist
