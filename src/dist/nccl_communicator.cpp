// NCCL collectives on the communicator's own CUDA stream, ordered against the
// caller's stream with events; compiled only with NCCL (nccl_communicator.h).
#include "dist/nccl_communicator.h"

#ifdef DOCMATCH_HAS_NCCL

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <glog/logging.h>
#include <mpi.h>

#include "dist/peer_probe.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <thread>

namespace docmatch::dist {
namespace {

void Check(ncclResult_t result, const char* what) {
  TORCH_CHECK(result == ncclSuccess, "[dist] NCCL ", what, ": ", ncclGetErrorString(result));
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
      TORCH_CHECK(false, "[dist] NCCL backend: unsupported dtype ", t.scalar_type());
  }
}

class NcclWork : public Work {
 public:
  NcclWork(Pending pending, ncclComm_t comm, torch::Device device, std::vector<torch::Tensor> keep)
      : pending_(std::move(pending)), comm_(comm), device_(device), keep_(std::move(keep)) {}
  at::cuda::CUDAEvent& done() { return done_; }

  void Wait() override {
    // Poll so that a dead or stopped peer ends the job instead of hanging it.
    WaitOrAbort(
        pending_, [this] { return done_.query(); }, [this] { ncclCommAbort(comm_); });
    // The caller's stream may now use the results.
    c10::cuda::CUDAGuard guard(device_);
    done_.block(c10::cuda::getCurrentCUDAStream(device_.index()));
  }

 private:
  Pending pending_;
  ncclComm_t comm_;
  torch::Device device_;
  std::vector<torch::Tensor> keep_;
  at::cuda::CUDAEvent done_;
};

std::string Describe(const char* op, const torch::Tensor& t) {
  std::ostringstream s;
  s << op << " of " << t.numel() * t.element_size() << " bytes (" << t.scalar_type() << ", NCCL)";
  return s.str();
}

}  // namespace

NcclCommunicator::NcclCommunicator(const torch::Device& device)
    : device_(device), stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device.index())) {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  ncclUniqueId id;
  if (rank_ == 0) Check(ncclGetUniqueId(&id), "get unique id");
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  c10::cuda::CUDAGuard guard(device_);
  Check(ncclCommInitRank(&comm_, size_, id, rank_), "communicator init");
  probe_ = std::make_shared<PeerProbe>(MPI_COMM_WORLD);
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) ncclCommDestroy(comm_);
}

WorkHandle NcclCommunicator::Launch(const std::string& what, const std::vector<torch::Tensor>& tensors,
                                    const std::function<void(cudaStream_t)>& enqueue) {
  c10::cuda::CUDAGuard guard(device_);
  for (const auto& t : tensors) {
    TORCH_CHECK(t.is_cuda() && t.device() == device_, "[dist] NCCL ", what, ": tensor on ", t.device().str(),
                ", communicator on ", device_.str());
    TORCH_CHECK(t.is_contiguous(), "[dist] NCCL collectives need contiguous tensors");
    // The allocator must not hand this memory out while NCCL still uses it.
    c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
  }
  at::cuda::CUDAEvent ready;
  ready.record(c10::cuda::getCurrentCUDAStream(device_.index()));
  ready.block(stream_);
  auto work = std::make_shared<NcclWork>(probe_->Start(what, timeout_), comm_, device_, tensors);
  enqueue(stream_.stream());
  work->done().record(stream_);
  return work;
}

WorkHandle NcclCommunicator::AllReduceAsync(torch::Tensor tensor) {
  const ncclRedOp_t op = tensor.scalar_type() == torch::kBool ? ncclMax : ncclSum;
  return Launch(Describe("all_reduce", tensor), {tensor}, [&](cudaStream_t stream) {
    Check(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), TypeOf(tensor), op, comm_, stream),
          "all_reduce");
  });
}

WorkHandle NcclCommunicator::AllGatherAsync(torch::Tensor input, torch::Tensor output) {
  TORCH_CHECK(output.numel() == input.numel() * size_, "[dist] all_gather: output holds ", output.numel(),
              " elements, expected ", input.numel() * size_);
  return Launch(Describe("all_gather", input), {input, output}, [&](cudaStream_t stream) {
    Check(ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), TypeOf(input), comm_, stream),
          "all_gather");
  });
}

WorkHandle NcclCommunicator::AllGatherUnevenAsync(torch::Tensor input, torch::Tensor output,
                                                  std::vector<int64_t> counts) {
  TORCH_CHECK(static_cast<int>(counts.size()) == size_ && counts[rank_] == input.size(0),
              "[dist] all_gather (uneven): counts do not match the ranks' rows");
  const int64_t row = output.size(0) > 0 ? output.numel() / output.size(0) : 1;
  // NCCL has no all_gatherv: one broadcast per rank, grouped into one launch.
  return Launch(Describe("all_gather (uneven)", input), {input, output}, [&](cudaStream_t stream) {
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

WorkHandle NcclCommunicator::ReduceScatterUnevenAsync(torch::Tensor input, torch::Tensor output,
                                                      std::vector<int64_t> counts) {
  TORCH_CHECK(static_cast<int>(counts.size()) == size_ && output.dim() >= 1 && counts[rank_] == output.size(0),
              "[dist] reduce_scatter (uneven): counts do not match the ranks' rows");
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  TORCH_CHECK(input.dim() >= 1 && input.size(0) == total, "[dist] reduce_scatter (uneven): input holds ",
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
      Check(ncclReduce(base + offset * row * input.element_size(), r == rank_ ? output.data_ptr() : nullptr,
                       counts[r] * row, TypeOf(input), ncclSum, r, comm_, stream),
            "reduce");
      offset += counts[r];
    }
    Check(ncclGroupEnd(), "group end");
  });
}

WorkHandle NcclCommunicator::BroadcastAsync(torch::Tensor tensor, int root) {
  return Launch(Describe("broadcast", tensor), {tensor}, [&](cudaStream_t stream) {
    Check(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), TypeOf(tensor), root, comm_, stream),
          "broadcast");
  });
}

WorkHandle NcclCommunicator::BarrierAsync() {
  torch::Tensor token = torch::zeros({1}, torch::TensorOptions().device(device_));
  return AllReduceAsync(token);
}

}  // namespace docmatch::dist

#endif  // DOCMATCH_HAS_NCCL
