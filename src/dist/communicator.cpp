// What both backends share: the synchronous forms, the timeout wait that names
// the stalled operation, and MakeCommunicator's choice (communicator.h).
#include "dist/communicator.h"

#include <glog/logging.h>

#include <algorithm>
#include <thread>

#include "dist/mpi_communicator.h"
#include "dist/runtime.h"
#ifdef DOCMATCH_HAS_NCCL
#include "dist/nccl_communicator.h"
#endif

namespace docmatch::dist {

bool PollBackoff::hot() const { return std::chrono::steady_clock::now() - start_ < std::chrono::milliseconds(5); }

void PollBackoff::Pause() {
  constexpr auto kLongest = std::chrono::microseconds(1000);
  if (hot()) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(sleep_);
  sleep_ = std::min(kLongest, sleep_ * 2);
}

torch::Tensor Communicator::AllGather(const torch::Tensor& input) {
  std::vector<int64_t> shape = input.sizes().vec();
  TORCH_CHECK(!shape.empty(), "all_gather needs at least one dimension");
  shape[0] *= size();
  torch::Tensor output = torch::empty(shape, input.options());
  AllGatherAsync(input.contiguous(), output)->Wait();
  return output;
}

std::vector<int64_t> Communicator::ExchangeCounts(int64_t rows, const torch::Device& device) {
  // One-hot rows summed over ranks; on the device the backend works on.
  torch::Tensor counts = torch::zeros({size()}, torch::TensorOptions(torch::kInt64).device(device));
  counts[rank()] = rows;
  AllReduce(counts);
  counts = counts.cpu();
  return std::vector<int64_t>(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + size());
}

torch::Tensor Communicator::ReduceScatterUneven(const torch::Tensor& input, const std::vector<int64_t>& counts) {
  TORCH_CHECK(input.dim() >= 1, "reduce_scatter needs at least one dimension");
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] = counts.at(rank());
  torch::Tensor output = torch::empty(shape, input.options());
  ReduceScatterUnevenAsync(input.contiguous(), output, counts)->Wait();
  return output;
}

torch::Tensor Communicator::AllGatherUneven(const torch::Tensor& input, std::vector<int64_t>* counts_out) {
  TORCH_CHECK(input.dim() >= 1, "all_gather needs at least one dimension");
  const std::vector<int64_t> rows = ExchangeCounts(input.size(0), input.device());
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] = 0;
  for (int64_t n : rows) shape[0] += n;
  torch::Tensor output = torch::empty(shape, input.options());
  AllGatherUnevenAsync(input.contiguous(), output, rows)->Wait();
  if (counts_out) *counts_out = rows;
  return output;
}

std::unique_ptr<Communicator> MakeCommunicator(const std::string& backend, const torch::Device& device,
                                               bool gpus_shared) {
  std::string chosen = backend;
  if (chosen == "auto") {
#ifdef DOCMATCH_HAS_NCCL
    chosen = device.is_cuda() && !gpus_shared ? "nccl" : "mpi";
#else
    chosen = "mpi";
#endif
  }
  std::unique_ptr<Communicator> communicator;
  if (chosen == "mpi") {
    communicator = std::make_unique<MpiCommunicator>();
  } else if (chosen == "nccl") {
#ifdef DOCMATCH_HAS_NCCL
    TORCH_CHECK(device.is_cuda(), "the NCCL backend needs a CUDA device, got ", device.str());
    communicator = std::make_unique<NcclCommunicator>(device);
#else
    TORCH_CHECK(false, "this docmatch was built without NCCL; use --backend mpi");
#endif
  } else {
    TORCH_CHECK(false, "unknown communication backend '", backend, "' (auto, mpi, nccl)");
  }
  if (communicator->rank() == 0) {
    LOG(INFO) << "[dist] " << communicator->size() << " ranks, backend " << communicator->backend() << " on "
              << device.str() << (gpus_shared ? " (GPUs shared by this node's ranks)" : "") << ", host allocator "
              << HostAllocator();
  }
  return communicator;
}

}  // namespace docmatch::dist
