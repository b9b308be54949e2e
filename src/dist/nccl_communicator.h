// The NCCL backend: CUDA tensors, one rank per GPU, collectives on the
// communicator's own stream. Each call makes that stream wait for the work
// already queued on the caller's stream (an event), and its Work makes the
// caller's stream wait for the result, so compute and communication overlap
// without host synchronisation. The NCCL unique id travels over MPI.
#pragma once

#ifdef DOCMATCH_HAS_NCCL

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <nccl.h>

#include <functional>
#include <memory>

#include "dist/communicator.h"

namespace docmatch::dist {

class PeerProbe;

class NcclCommunicator : public Communicator {
 public:
  explicit NcclCommunicator(const torch::Device& device);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  WorkHandle AllReduceAsync(torch::Tensor tensor) override;
  WorkHandle AllGatherAsync(torch::Tensor input, torch::Tensor output) override;
  WorkHandle AllGatherUnevenAsync(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) override;
  WorkHandle ReduceScatterUnevenAsync(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) override;
  WorkHandle BroadcastAsync(torch::Tensor tensor, int root) override;
  WorkHandle BarrierAsync() override;

 private:
  // Orders the NCCL stream after the caller's, runs `enqueue` on it, and
  // returns a Work that orders the caller's stream after NCCL.
  WorkHandle Launch(const std::string& what, const std::vector<torch::Tensor>& tensors,
                    const std::function<void(cudaStream_t)>& enqueue);

  torch::Device device_;
  ncclComm_t comm_ = nullptr;
  c10::cuda::CUDAStream stream_;
  int rank_ = 0, size_ = 1;
  std::shared_ptr<PeerProbe> probe_;
};

}  // namespace docmatch::dist

#endif  // DOCMATCH_HAS_NCCL
