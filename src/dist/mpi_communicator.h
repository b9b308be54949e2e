// The MPI backend: non-blocking MPI collectives (MPI_Iallreduce & co.) on a
// private duplicate of MPI_COMM_WORLD. CPU tensors are used in place; CUDA
// tensors are staged through host memory (several ranks can then share one
// GPU). bf16 and fp16 reduce with user-defined MPI sums, so a bf16 gradient
// all-reduce really moves half the bytes.
#pragma once

#include <mpi.h>

#include <memory>

#include "dist/communicator.h"
#include "dist/peer_probe.h"

namespace docmatch::dist {

class MpiCommunicator : public Communicator {
 public:
  // A private duplicate of `base` (MPI_COMM_SELF gives a one-rank
  // communicator) for tensors on `device`.
  explicit MpiCommunicator(MPI_Comm base = MPI_COMM_WORLD, const torch::Device& device = torch::kCPU);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::kMpi; }
  WorkHandle BarrierAsync() override;

 protected:
  WorkHandle DoAllReduce(torch::Tensor tensor) override;
  WorkHandle DoAllGather(torch::Tensor input, torch::Tensor output) override;
  WorkHandle DoAllGatherUneven(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) override;
  WorkHandle DoReduceScatterUneven(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) override;
  WorkHandle DoBroadcast(torch::Tensor tensor, int root) override;

 private:
  PrivateComm comm_;
  std::shared_ptr<PeerProbe> probe_;
  int rank_ = 0, size_ = 1;
};

}  // namespace docmatch::dist
