// MPI start-up and shut-down, placement from the launcher's environment, the
// host allocator setting, and the rule that one rank's failure ends the job (runtime.h).
#include "dist/runtime.h"

#include <glog/logging.h>
#include <malloc.h>
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <new>
#include <stdexcept>
#include <string>

#include "console/error.h"
#include "console/interrupt.h"
#include "console/log_sink.h"
#include "console/printable.h"

#ifdef DOCMATCH_HAS_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace docmatch::dist {
namespace {
std::string host_allocator = "system";
}  // namespace

std::string ConfigureHostAllocator() {
  const char* requested = std::getenv("DOCMATCH_HOST_ALLOCATOR");
  const std::string mode = requested && *requested ? requested : "retain";
  // Plain exceptions, not TORCH_CHECK: main() prints what() before anything
  // else runs, and a user should read one sentence, not a backtrace.
  if (mode != "retain" && mode != "system") {
    throw std::invalid_argument("DOCMATCH_HOST_ALLOCATOR=" + mode +
                                " is not a host allocator mode (retain, system); unset it for the default");
  }
  if (mode == "retain") {
    // Large blocks from the heap instead of mmap, and a heap never trimmed
    // (mallopt(3): -1 disables trimming), so freed activations are reused.
    if (mallopt(M_MMAP_MAX, 0) != 1 || mallopt(M_TRIM_THRESHOLD, -1) != 1) {
      throw std::runtime_error("mallopt refused the retain settings; set DOCMATCH_HOST_ALLOCATOR=system");
    }
  }
  host_allocator = mode;
  return mode;
}

std::string HostAllocator() { return host_allocator; }

void QuietProfilerWithoutGpuDriver() {
  // Kineto's levels run from 0 (verbose) to 4 (error); 5 prints nothing.
  constexpr char kKinetoSilent[] = "5";
  if (!std::filesystem::exists("/proc/driver/nvidia")) setenv("KINETO_LOG_LEVEL", kKinetoSilent, /*overwrite=*/0);
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  // Under a file size limit (ulimit -f) Open MPI's singleton start-up dies
  // in PMIx's shared-memory store, whose segment files outgrow the limit
  // (SIGXFSZ in the helper it forks). PMIx's hash store keeps that data in
  // memory; docmatch's own writers then name the limit ("File too large").
  rlimit file_size{};
  if (getrlimit(RLIMIT_FSIZE, &file_size) == 0 && file_size.rlim_cur != RLIM_INFINITY)
    setenv("PMIX_MCA_gds", "hash", /*overwrite=*/0);
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  if (provided < MPI_THREAD_MULTIPLE) {
    std::cerr << "[dist] rank " << rank_ << ": this MPI library gives thread level " << provided
              << ", docmatch needs MPI_THREAD_MULTIPLE (collectives start on autograd threads)" << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

MpiRuntime::~MpiRuntime() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised) MPI_Finalize();
}

namespace {

// Whether --device names a GPU: a wrong name, or cuda without a GPU, is an
// error. Nothing is set, so a rank asks this before its placement.
bool NamesCuda(const std::string& device) {
  // Plain exceptions: these are the user's mistakes, not worth a c10 backtrace.
  if (device != "cpu" && device != "cuda" && device != "auto") {
    throw Error("dist", "unknown device '" + device + "' (cpu, cuda, auto)");
  }
  if (device == "cpu" || (device == "auto" && !torch::cuda::is_available())) return false;
  if (torch::cuda::device_count() == 0) {
    throw Error("dist", "--device cuda, but no CUDA device is visible");
  }
  return true;
}

}  // namespace

torch::Device ProcessDevice(const std::string& device) {
  if (!NamesCuda(device)) return torch::kCPU;
  const torch::Device first(torch::kCUDA, 0);
  UseDevice(first);
  return first;
}

namespace {

// What identifies this rank's GPU on its node: the device's UUID, so that
// ranks which see different CUDA_VISIBLE_DEVICES compare the same way.
std::string GpuIdentity(const torch::Device& device) {
#ifdef DOCMATCH_HAS_CUDA
  const cudaDeviceProp* properties = at::cuda::getDeviceProperties(device.index());
  return std::string(properties->uuid.bytes, sizeof(properties->uuid.bytes));
#else
  return device.str();
#endif
}

}  // namespace

bool AnyShared(const std::vector<std::string>& identities) {
  std::vector<std::string> sorted = identities;
  std::sort(sorted.begin(), sorted.end());
  return std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();
}

Placement DiscoverPlacement(const std::string& device, bool share_gpus) {
  const bool cuda = NamesCuda(device);  // a wrong name fails here, before any collective
  Placement p;
  MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p.size);
  const char* ompi_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const char* ompi_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const char* slurm_rank = std::getenv("SLURM_LOCALID");
  // The shared-memory split is the ground truth; the launcher's variables say
  // the same on a well-formed launch and are what users know to look at.
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, p.rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &p.local_rank);
  MPI_Comm_size(node, &p.local_size);
  p.local_rank_source = "MPI shared-memory split";
  if (ompi_rank) {
    p.local_rank = std::atoi(ompi_rank);
    if (ompi_size) p.local_size = std::atoi(ompi_size);
    p.local_rank_source = "OMPI_COMM_WORLD_LOCAL_RANK";
  } else if (slurm_rank) {
    p.local_rank = std::atoi(slurm_rank);
    p.local_rank_source = "SLURM_LOCALID";
  }

  // Every rank of the node reaches the exchange below, CPU or not and even
  // when its placement failed (then with the error in its slot), so none
  // waits alone; then every rank of the node fails, the one that could not be
  // placed naming why.
  std::string identity = "cpu", error;
  if (cuda) {
    try {
      const int gpus = static_cast<int>(torch::cuda::device_count());
      if (gpus == 1 && p.local_size > 1) {
        // One visible GPU on a node of several ranks (srun --gpus-per-task=1
        // sets CUDA_VISIBLE_DEVICES per rank; or one GPU for all): every
        // rank, local rank 0 included, takes it; the identities below say
        // whether the ranks really share one.
        p.device = torch::Device(torch::kCUDA, 0);
        p.local_rank_source += ", one visible GPU per rank";
      } else if (!share_gpus && p.local_rank >= gpus) {
        error = "[dist] rank " + std::to_string(p.rank) + " has local rank " + std::to_string(p.local_rank) + " (" +
                p.local_rank_source + ") but this node shows " + std::to_string(gpus) +
                " GPUs: launch at most one rank per GPU (mpirun -np / --map-by), or use the MPI backend to share GPUs";
      } else {
        p.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(p.local_rank % gpus));
      }
      if (error.empty()) identity = "gpu:" + GpuIdentity(p.device);
    } catch (const std::exception& e) {
      error = std::string("[dist] rank ") + std::to_string(p.rank) + ": placing it on a GPU failed: " + e.what();
    }
  }
  if (!error.empty()) identity = "err:";
  // Fixed-size slots: "gpu:" and a UUID (16 bytes), "cpu", or "err:".
  constexpr int kSlot = 32;
  identity.resize(kSlot, '\0');
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  std::vector<char> all(static_cast<size_t>(kSlot) * node_size);
  MPI_Allgather(identity.data(), kSlot, MPI_CHAR, all.data(), kSlot, MPI_CHAR, node);
  MPI_Comm_free(&node);
  std::vector<std::string> gpus;
  for (int r = 0; r < node_size; ++r) {
    std::string other(all.data() + static_cast<size_t>(r) * kSlot, kSlot);
    if (other.rfind("err:", 0) == 0 && error.empty()) {
      error = "[dist] rank " + std::to_string(p.rank) + ": another rank of this node (node rank " + std::to_string(r) +
              ") could not be placed; its own error names why";
    }
    if (other.rfind("gpu:", 0) == 0) gpus.push_back(other);
  }
  if (!error.empty()) throw std::invalid_argument(error);
  if (p.device.is_cuda()) p.gpus_shared = AnyShared(gpus);
  return p;
}

torch::Device ResolveDevice(const torch::Device& device) {
#ifdef DOCMATCH_HAS_CUDA
  if (device.is_cuda() && !device.has_index()) return {torch::kCUDA, c10::cuda::current_device()};
#endif
  return device;
}

void UseDevice(const torch::Device& device) {
#ifdef DOCMATCH_HAS_CUDA
  if (!device.is_cuda()) return;
  c10::cuda::set_device(device.index());
  // Attention without cuDNN's kernels: cuDNN builds a plan for every new
  // shape, and SMITH's batches bring new shapes at every step (the real
  // blocks of 32 documents), so bf16 pre-training ran at a third of fp32's
  // rate on an H100 (bench/NOTES.md). Flash attention needs no plan.
  // DOCMATCH_SDPA_CUDNN=1 keeps cuDNN's, to measure it.
  const char* cudnn_sdpa = std::getenv("DOCMATCH_SDPA_CUDNN");
  at::globalContext().setSDPUseCuDNN(cudnn_sdpa != nullptr && std::string(cudnn_sdpa) == "1");
  // DOCMATCH_CUDA_SYNC_DEBUG=warn (or error): PyTorch reports (or refuses)
  // every operation that makes the host wait for the GPU: the host
  // synchronisations of a step, counted in its log (scripts/device/gpu-checks.sh).
  if (const char* mode = std::getenv("DOCMATCH_CUDA_SYNC_DEBUG")) {
    const std::string m = mode;
    if (m == "warn") c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
    if (m == "error") c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  }
#else
  (void)device;
#endif
}

void SetUpRankLogging(int rank, const std::string& log_dir) {
  console::UsePlainConsoleLog(rank == 0 ? google::GLOG_INFO : google::GLOG_WARNING);
  // glog writes each message to the file of its severity and of every lower
  // one, so the INFO file holds everything; no other files, and none at all
  // without a log folder (glog would otherwise scatter them in /tmp).
  for (auto severity : {google::GLOG_WARNING, google::GLOG_ERROR, google::GLOG_FATAL}) {
    google::SetLogDestination(severity, "");
  }
  std::string base;
  if (!log_dir.empty()) {
    std::filesystem::create_directories(log_dir);
    base = log_dir + "/rank-" + std::to_string(rank) + ".log.";
  }
  google::SetLogDestination(google::GLOG_INFO, base.c_str());
}

namespace {
bool show_backtraces = false;
}  // namespace

void ShowBacktraces(bool on) { show_backtraces = on; }

std::string ErrorMessage(const std::exception& error) {
  if (dynamic_cast<const std::bad_alloc*>(&error) != nullptr) {
    return "out of memory (an allocation failed: " + std::string(error.what()) +
           "); use smaller batches or inputs, or give the process more memory";
  }
  const auto* torch_error = dynamic_cast<const c10::Error*>(&error);
  // A message may quote a user's bytes (a path, an id, a line of a file).
  return console::Printable(torch_error && !show_backtraces ? torch_error->what_without_backtrace() : error.what());
}

int RunOnAllRanks(const std::function<int()>& body) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string message;
  int code = 1;
  try {
    return body();
  } catch (const console::Interrupted& e) {
    if (size == 1) throw;  // main exits 128 + the signal
    message = e.what();
    code = 128 + e.signal();  // mpirun exits with it
  } catch (const std::exception& e) {
    message = ErrorMessage(e);
  } catch (...) {
    message = "an unknown exception";
  }
  if (size == 1) {
    // Nobody else to stop: the message alone, and MPI finalises as usual
    // (no MPI_ABORT banner for a user error).
    std::cerr << "error: " << message << std::endl;
    return 1;
  }
  // One write: std::cerr is unbuffered, so piece by piece the line could be
  // split by mpirun's own MPI_ABORT banner on the same stream.
  const std::string line =
      "[dist] rank " + std::to_string(rank) + " failed: " + message + "\n[dist] ending every rank of the job\n";
  std::cerr.write(line.data(), static_cast<std::streamsize>(line.size()));
  std::cerr.flush();
  MPI_Abort(MPI_COMM_WORLD, code);
  return code;
}

}  // namespace docmatch::dist
