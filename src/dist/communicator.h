// Communicator: the collectives data-parallel training needs, behind one
// small interface (STYLE.md, after Marian), so models never see MPI or NCCL.
//
// Every collective has an async form that returns a Work handle; Wait() blocks
// until the result is in place and aborts the whole job, naming the operation,
// if it takes longer than the communicator's timeout (a peer that died or
// never joined must not hang the others), after asking every peer where it
// is so the report names the rank that stalls (peer_probe.h). The sync forms are Async + Wait.
// Backends: MPI (CPU tensors, CUDA tensors staged through host memory) and
// NCCL (CUDA tensors, on its own stream). Choose with MakeCommunicator.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace docmatch::dist {

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective is complete and its output is usable.
  virtual void Wait() = 0;
  // Lets the library advance the collective without blocking. MPI moves
  // non-blocking collectives forward only inside MPI calls, so callers that
  // want overlap poke their pending work now and then (the synchronizer does
  // it from every gradient hook).
  virtual void Progress() {}
};
using WorkHandle = std::shared_ptr<Work>;

// How a Wait() polls: hot for the first few milliseconds (a collective
// usually completes soon after its last peer arrives), then sleeping, with
// the sleep doubling up to a millisecond, so a rank that waits minutes on a
// stalled peer uses a few percent of a core instead of all of it.
class PollBackoff {
 public:
  void Pause();
  // Still in the first, hot milliseconds.
  bool hot() const;

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::microseconds sleep_{10};
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi" or "nccl"

  // In place: every rank ends with the sum over ranks. Any shape.
  virtual WorkHandle AllReduceAsync(torch::Tensor tensor) = 0;
  // `output` (size * n, ...) receives every rank's `input` (n, ...) in rank order.
  virtual WorkHandle AllGatherAsync(torch::Tensor input, torch::Tensor output) = 0;
  // Uneven rows: rank r contributes counts[r] rows; `output` has sum(counts).
  virtual WorkHandle AllGatherUnevenAsync(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) = 0;
  // The sum over ranks of `input` (sum(counts), ...), of which rank r keeps
  // rows [counts[0] + ... + counts[r-1], +counts[r]) in `output` (counts[r], ...).
  // Moves (size-1)/size of the input per rank on a ring, half an all-reduce's.
  virtual WorkHandle ReduceScatterUnevenAsync(torch::Tensor input, torch::Tensor output,
                                              std::vector<int64_t> counts) = 0;
  // In place: every rank ends with `root`'s tensor.
  virtual WorkHandle BroadcastAsync(torch::Tensor tensor, int root) = 0;
  virtual WorkHandle BarrierAsync() = 0;

  // Sync forms.
  void AllReduce(torch::Tensor tensor) { AllReduceAsync(std::move(tensor))->Wait(); }
  void Broadcast(torch::Tensor tensor, int root) { BroadcastAsync(std::move(tensor), root)->Wait(); }
  void Barrier() { BarrierAsync()->Wait(); }
  // input (n, ...) -> (size * n, ...)
  torch::Tensor AllGather(const torch::Tensor& input);
  // input (n_r, ...) -> (sum n_r, ...); exchanges the row counts first.
  torch::Tensor AllGatherUneven(const torch::Tensor& input, std::vector<int64_t>* counts = nullptr);
  // input (sum counts, ...) -> this rank's rows of the sum over ranks.
  torch::Tensor ReduceScatterUneven(const torch::Tensor& input, const std::vector<int64_t>& counts);
  // Every rank's `rows`, in rank order (one small all-reduce on `device`).
  std::vector<int64_t> ExchangeCounts(int64_t rows, const torch::Device& device);

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 protected:
  std::chrono::milliseconds timeout_{std::chrono::minutes(5)};
};

// "mpi", "nccl", or "auto": NCCL for a CUDA device when compiled in and no
// other rank of this node shares the GPU (`gpus_shared`, Placement's; NCCL
// refuses two ranks on one GPU), else MPI. Logs the choice. Needs MPI
// initialised (see runtime.h).
std::unique_ptr<Communicator> MakeCommunicator(const std::string& backend, const torch::Device& device,
                                               bool gpus_shared = false);

}  // namespace docmatch::dist
