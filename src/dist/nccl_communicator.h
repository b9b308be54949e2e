// The NCCL backend: CUDA tensors, one rank per GPU, collectives on the
// communicator's own stream. Each call makes that stream wait for the work
// already queued on the caller's stream (an event), and its Work's Wait()
// makes the caller's stream wait for the result without blocking the host
// (as c10d's ProcessGroupNCCL), so compute and communication overlap without
// host synchronisation. A watchdog thread follows the launched collectives
// in order: one that outlasts the timeout, or an asynchronous NCCL error
// (ncclCommGetAsyncError), ends the job naming the stalled rank or the
// error. The NCCL unique id travels over MPI; an init that outlasts the
// timeout ends the job too.
#pragma once

#ifdef DOCMATCH_HAS_NCCL

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <nccl.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "dist/communicator.h"

namespace docmatch::dist {

class PeerProbe;
class NcclWork;

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(const torch::Device& device, std::chrono::milliseconds timeout);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::kNccl; }
  WorkHandle BarrierAsync() override;

 protected:
  WorkHandle DoAllReduce(torch::Tensor tensor) override;
  WorkHandle DoAllGather(torch::Tensor input, torch::Tensor output) override;
  WorkHandle DoAllGatherUneven(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) override;
  WorkHandle DoReduceScatterUneven(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) override;
  WorkHandle DoBroadcast(torch::Tensor tensor, int root) override;

 private:
  // Orders the NCCL stream after the caller's, runs `enqueue` on it, and
  // returns a Work that orders the caller's stream after NCCL.
  WorkHandle Launch(const std::string& what, const std::vector<torch::Tensor>& tensors,
                    const std::function<void(cudaStream_t)>& enqueue);

  // The watchdog's loop: each launched collective, in order, until it
  // completes, the communicator reports an error, or the timeout passes.
  void Watch();
  // Ends every rank of the job (exit code 3), after the error is logged.
  void AbortJob();

  ncclComm_t comm_ = nullptr;
  c10::cuda::CUDAStream stream_;
  int rank_ = 0, size_ = 1;
  std::shared_ptr<PeerProbe> probe_;
  std::mutex watched_mutex_;
  std::condition_variable watched_changed_;
  std::deque<std::shared_ptr<NcclWork>> watched_;
  bool stopping_ = false;    // the communicator is being destroyed: follow what is left, then stop
  bool abandoning_ = false;  // ... while an exception unwinds: stop following at once
  bool abandoned_ = false;   // a collective was still running when following stopped
  std::thread watchdog_;
};

}  // namespace docmatch::dist

#endif  // DOCMATCH_HAS_NCCL
