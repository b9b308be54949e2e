// NCCL collectives on the communicator's own CUDA stream, ordered against the
// caller's stream with events; compiled only with NCCL (nccl_communicator.h).
#include "dist/nccl_communicator.h"

#ifdef DOCMATCH_HAS_NCCL

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <glog/logging.h>
#include <mpi.h>

#include "console/error.h"
#include "dist/peer_probe.h"

#include <algorithm>
#include <exception>
#include <numeric>
#include <sstream>
#include <thread>

namespace docmatch::dist {
namespace {

void Check(ncclResult_t result, const char* what) {
  DOCMATCH_CHECK(result == ncclSuccess, "dist", "NCCL ", what, ": ", ncclGetErrorString(result));
}

ncclDataType_t TypeOf(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32:
      return ncclFloat32;
    case torch::kFloat64:
      return ncclFloat64;
    case torch::kInt32:
      return ncclInt32;
    case torch::kInt64:
      return ncclInt64;
    case torch::kUInt8:
      return ncclUint8;
    case torch::kBool:
      return ncclUint8;
    case torch::kInt8:
      return ncclInt8;
    case torch::kBFloat16:
      return ncclBfloat16;
    case torch::kHalf:
      return ncclFloat16;
    default:
      DOCMATCH_CHECK(false, "dist", "NCCL backend: unsupported dtype ", t.scalar_type());
  }
}

}  // namespace

// One launched collective. Wait() orders the caller's stream after it and
// returns at once; the communicator's watchdog follows its completion on the
// host.
class NcclWork : public Work {
 public:
  NcclWork(Pending pending, torch::Device device, std::vector<torch::Tensor> keep)
      : pending_(std::move(pending)), device_(device), keep_(std::move(keep)) {}
  at::cuda::CUDAEvent& done() { return done_; }
  const Pending& pending() const { return pending_; }

  void Wait() override {
    // The caller's stream may use the results once the collective ends; the
    // host goes on (no host synchronisation, as c10d's Work::wait).
    c10::cuda::CUDAGuard guard(device_);
    done_.block(c10::cuda::getCurrentCUDAStream(device_.index()));
  }

 private:
  Pending pending_;
  torch::Device device_;
  std::vector<torch::Tensor> keep_;  // alive until the watchdog sees the end
  at::cuda::CUDAEvent done_;
};

namespace {

std::string Describe(const char* op, const torch::Tensor& t) {
  std::ostringstream s;
  s << op << " of " << t.numel() * t.element_size() << " bytes (" << t.scalar_type() << ", NCCL)";
  return s.str();
}

}  // namespace

NcclCommunicator::NcclCommunicator(const torch::Device& device, std::chrono::milliseconds timeout)
    : Communicator(device), stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, this->device().index())) {
  timeout_ = timeout;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  ncclUniqueId id;
  if (rank_ == 0) Check(ncclGetUniqueId(&id), "get unique id");
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  c10::cuda::CUDAGuard guard(this->device());
  {
    // ncclCommInitRank blocks until every rank has joined; a rank that never
    // does (a network fault, a dead peer) must end the job, not hang it.
    std::mutex mutex;
    std::condition_variable joined;
    bool done = false;
    std::thread timer([&] {
      std::unique_lock<std::mutex> lock(mutex);
      if (joined.wait_for(lock, timeout, [&] { return done; })) return;
      LOG(ERROR) << "[dist] rank " << rank_ << ": the NCCL communicator did not initialise within "
                 << timeout.count() / 1000.0 << " s (a rank did not join, or NCCL cannot reach it: NCCL_DEBUG=INFO "
                 << "says why). Aborting the job (--collective-timeout sets the limit).";
      google::FlushLogFiles(google::GLOG_INFO);
      MPI_Abort(MPI_COMM_WORLD, 3);
    });
    const ncclResult_t result = ncclCommInitRank(&comm_, size_, id, rank_);
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
    }
    joined.notify_all();
    timer.join();
    Check(result, "communicator init");
  }
  probe_ = std::make_shared<PeerProbe>(MPI_COMM_WORLD);
  watchdog_ = std::thread([this] { Watch(); });
}

NcclCommunicator::~NcclCommunicator() {
  // Unwinding an error, the collectives still queued may need peers that
  // will never issue them: they are abandoned and the communicator aborted,
  // so the error reaches the user at once. Otherwise every rank issued the
  // same collectives: the watchdog follows the last of them to their end (or
  // the timeout ends the job) and the communicator is destroyed, as on every
  // other rank. One rank aborting while its peers destroy can hang NCCL's
  // teardown, which is collective within a node.
  {
    std::lock_guard<std::mutex> lock(watched_mutex_);
    stopping_ = true;
    abandoning_ = std::uncaught_exceptions() > 0;
  }
  watched_changed_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  if (!comm_) return;
  if (abandoning_ || abandoned_) {
    ncclCommAbort(comm_);
  } else {
    ncclCommDestroy(comm_);
  }
}

void NcclCommunicator::Watch() {
  // This thread's CUDA calls (event queries) go to the rank's GPU, not GPU 0,
  // where they would make a context of their own.
  c10::cuda::CUDAGuard guard(device());
  try {
    for (;;) {
      std::shared_ptr<NcclWork> work;
      {
        std::unique_lock<std::mutex> lock(watched_mutex_);
        watched_changed_.wait(lock, [&] { return stopping_ || !watched_.empty(); });
        if (watched_.empty()) return;  // stopping, nothing left to follow
        work = watched_.front();
      }
      WaitOrAbort(
          work->pending(),
          [&] {
            ncclResult_t state = ncclSuccess;
            ncclCommGetAsyncError(comm_, &state);
            if (state != ncclSuccess && state != ncclInProgress) {
              LOG(ERROR) << "[dist] " << probe_->Name(rank_) << ": NCCL reported an error during "
                         << work->pending().what << ": " << ncclGetErrorString(state) << " (" << ncclGetLastError(comm_)
                         << "). Aborting the job.";
              google::FlushLogFiles(google::GLOG_INFO);
              AbortJob();
            }
            if (work->done().query()) return true;
            // Unwinding an error, collectives nobody may complete are not followed.
            std::lock_guard<std::mutex> lock(watched_mutex_);
            if (abandoning_) abandoned_ = true;
            return abandoning_;
          },
          PollBackoff::Patient());
      std::lock_guard<std::mutex> lock(watched_mutex_);
      watched_.pop_front();
    }
  } catch (const std::exception& e) {
    // A sticky CUDA error (an illegal access in any kernel) surfaces here
    // first; an exception leaving the thread would end the process silently.
    LOG(ERROR) << "[dist] " << probe_->Name(rank_) << ": the NCCL watchdog failed: " << e.what()
               << ". Aborting the job.";
    google::FlushLogFiles(google::GLOG_INFO);
    AbortJob();
  }
}

void NcclCommunicator::AbortJob() {
  // Not ncclCommAbort first: on a dead or hung peer, which is when this runs,
  // it can block, and MPI_Abort would never come. Ending the processes frees
  // NCCL's resources.
  MPI_Abort(MPI_COMM_WORLD, 3);
}

WorkHandle NcclCommunicator::Launch(const std::string& what, const std::vector<torch::Tensor>& tensors,
                                    const std::function<void(cudaStream_t)>& enqueue) {
  c10::cuda::CUDAGuard guard(device());
  for (const auto& t : tensors) {
    DOCMATCH_CHECK(t.is_cuda() && t.device() == device(), "dist", "NCCL ", what, ": tensor on ", t.device().str(),
                   ", communicator on ", device().str());
    // The allocator must not hand this memory out while NCCL still uses it.
    c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
  }
  at::cuda::CUDAEvent ready;
  ready.record(c10::cuda::getCurrentCUDAStream(device().index()));
  ready.block(stream_);
  auto work = std::make_shared<NcclWork>(probe_->Start(what, timeout_), device(), tensors);
  enqueue(stream_.stream());
  work->done().record(stream_);
  {
    std::lock_guard<std::mutex> lock(watched_mutex_);
    watched_.push_back(work);
  }
  watched_changed_.notify_all();
  return work;
}

WorkHandle NcclCommunicator::DoAllReduce(torch::Tensor tensor) {
  const ncclRedOp_t op = tensor.scalar_type() == torch::kBool ? ncclMax : ncclSum;
  return Launch(Describe("all_reduce", tensor), {tensor}, [&](cudaStream_t stream) {
    Check(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), TypeOf(tensor), op, comm_, stream),
          "all_reduce");
  });
}

WorkHandle NcclCommunicator::DoAllGather(torch::Tensor input, torch::Tensor output) {
  DOCMATCH_CHECK(output.numel() == input.numel() * size_, "dist", "all_gather: output holds ", output.numel(),
                 " elements, expected ", input.numel() * size_);
  return Launch(Describe("all_gather", input), {input, output}, [&](cudaStream_t stream) {
    Check(ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), TypeOf(input), comm_, stream),
          "all_gather");
  });
}

WorkHandle NcclCommunicator::DoAllGatherUneven(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) {
  DOCMATCH_CHECK(static_cast<int>(counts.size()) == size_ && counts[rank_] == input.size(0), "dist",
                 "all_gather (uneven): counts do not match the ranks' rows");
  const int64_t row = output.size(0) > 0 ? output.numel() / output.size(0) : 1;
  const bool even = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
  return Launch(Describe("all_gather (uneven)", input), {input, output}, [&](cudaStream_t stream) {
    if (even) {  // DocSplit's and SDR's pools: NCCL's own all-gather
      Check(ncclAllGather(input.data_ptr(), output.data_ptr(), counts[0] * row, TypeOf(input), comm_, stream),
            "all_gather");
      return;
    }
    // NCCL has no all_gatherv: one broadcast per rank, grouped into one launch.
    Check(ncclGroupStart(), "group start");
    int64_t offset = 0;
    char* base = static_cast<char*>(output.data_ptr());
    for (int r = 0; r < size_; ++r) {
      void* destination = base + offset * row * output.element_size();
      Check(ncclBroadcast(r == rank_ ? input.data_ptr() : destination, destination, counts[r] * row, TypeOf(output), r,
                          comm_, stream),
            "broadcast");
      offset += counts[r];
    }
    Check(ncclGroupEnd(), "group end");
  });
}

WorkHandle NcclCommunicator::DoReduceScatterUneven(torch::Tensor input, torch::Tensor output,
                                                   std::vector<int64_t> counts) {
  DOCMATCH_CHECK(static_cast<int>(counts.size()) == size_ && output.dim() >= 1 && counts[rank_] == output.size(0),
                 "dist", "reduce_scatter (uneven): counts do not match the ranks' rows");
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  DOCMATCH_CHECK(input.dim() >= 1 && input.size(0) == total, "dist", "reduce_scatter (uneven): input holds ",
                 input.dim() ? input.size(0) : 0, " rows, the counts add up to ", total);
  const int64_t row = total > 0 ? input.numel() / total : 0;
  const bool even = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
  return Launch(Describe("reduce_scatter", input), {input, output}, [&](cudaStream_t stream) {
    if (even) {
      Check(ncclReduceScatter(input.data_ptr(), output.data_ptr(), counts[0] * row, TypeOf(input), ncclSum, comm_,
                              stream),
            "reduce_scatter");
      return;
    }
    // NCCL's reduce-scatter wants equal parts: one reduce per rank instead,
    // grouped into one launch, each to the rank that keeps those rows.
    Check(ncclGroupStart(), "group start");
    int64_t offset = 0;
    const char* base = static_cast<const char*>(input.data_ptr());
    for (int r = 0; r < size_; ++r) {
      Check(ncclReduce(base + offset * row * input.element_size(), output.data_ptr() /* written on root r alone */,
                       counts[r] * row, TypeOf(input), ncclSum, r, comm_, stream),
            "reduce");
      offset += counts[r];
    }
    Check(ncclGroupEnd(), "group end");
  });
}

WorkHandle NcclCommunicator::DoBroadcast(torch::Tensor tensor, int root) {
  return Launch(Describe("broadcast", tensor), {tensor}, [&](cudaStream_t stream) {
    Check(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), TypeOf(tensor), root, comm_, stream),
          "broadcast");
  });
}

WorkHandle NcclCommunicator::BarrierAsync() {
  torch::Tensor token = torch::zeros({1}, torch::TensorOptions().device(device()));
  return AllReduceAsync(token);
}

}  // namespace docmatch::dist

#endif  // DOCMATCH_HAS_NCCL
