// GradientSynchronizer: data-parallel gradient averaging with a clear life
// cycle (after flashlight's reducers):
//
//   synchronizer.BroadcastParameters();      // once: every rank starts from rank 0's weights
//   for each step:
//     for each micro-step k of K:
//       synchronizer.Prepare(/*sync=*/k == K - 1);
//       loss.backward();                     // hooks fill buckets, launch all-reduces
//     synchronizer.Finalize();               // waits, averages, writes .grad
//     optimizer.step();
//
// Parameters are packed, in reverse registration order (the order backward
// tends to produce their gradients), into flat buckets of about
// `bucket_bytes`. During a syncing backward, each parameter's hook copies its
// accumulated gradient (earlier micro-steps plus this one) into its bucket;
// when a bucket is full its all-reduce starts at once (after every earlier
// bucket's, so all ranks issue collectives in one order), overlapping the
// rest of the backward. Accumulation micro-steps communicate nothing. Finalize()
// launches buckets left incomplete (parameters this step did not use count
// as zero gradients), waits for all, divides by the world size and writes
// the averages into every parameter's .grad. A parameter no rank used this
// step keeps no gradient (as in one process), so AdamW leaves it alone
// instead of decaying it; which were used crosses on the control plane.
//
// Buckets launch during backward, on the same data plane as the all-gather's
// backward reduce-scatter, so every rank must reach them in one order: that
// holds while which parameters a step uses does not depend on the rank's
// data (a rank that skips a parameter another rank uses would launch its
// bucket later, after the reduce-scatter). No model here branches on data.
//
// The first synced step also records the order in which gradients arrived
// (rank 0's order, broadcast on the control plane so every rank agrees) and rebuilds the buckets
// in that order, with parameters that got no gradient last: a bucket that
// waits on an unused parameter (a head the objective does not touch) would
// otherwise hold back every bucket after it until Finalize().
//
// At one rank there is nothing to average: no buckets, no hooks, no
// collectives; Prepare and Finalize only keep the life cycle checked.
//
// The parameters that require gradients at construction are the synced ones;
// turning requires_grad off for some steps (a frozen level: no graph through
// it, no gradient) and on again is allowed: they count as unused meanwhile.
#pragma once

#include <torch/torch.h>

#include <mutex>
#include <vector>

#include "dist/process_group.h"

namespace docmatch::dist {

struct SynchronizerOptions {
  int64_t bucket_bytes = 25 << 20;  // bytes of fp32 gradient per bucket (DDP's default, 25 MB)
  bool bf16 = false;                // all-reduce buckets in bf16 (half the bytes, bf16 rounding)
};

class GradientSynchronizer {
 public:
  GradientSynchronizer(std::vector<torch::Tensor> parameters, ProcessGroup& group, SynchronizerOptions options = {});
  GradientSynchronizer(const GradientSynchronizer&) = delete;
  GradientSynchronizer& operator=(const GradientSynchronizer&) = delete;
  ~GradientSynchronizer();  // removes its hooks from the parameters

  void BroadcastParameters();
  // Before each backward: `sync` on the micro-step that ends a step.
  void Prepare(bool sync);
  // After the syncing backward, before the optimizer.
  void Finalize();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // Buckets whose all-reduce started during backward (not in Finalize) in the last synced step.
  int buckets_launched_during_backward() const { return launched_early_; }

 private:
  struct Slot {
    int bucket;
    int position;           // index in the bucket's parameter list
    int64_t offset, numel;  // into the bucket's flat buffer
  };
  struct Bucket {
    std::vector<int> parameters;
    torch::Tensor buffer;  // (numel,) fp32 on the parameters' device
    torch::Tensor wire;    // what travels: buffer itself, or its bf16 copy
    int ready = 0;
    bool complete = false;
    std::vector<bool> filled;
    WorkHandle work;
  };

  // Packs parameters, in `order`, into buckets of about bucket_bytes.
  void BuildBuckets(const std::vector<int>& order);
  // After the first synced step: buckets in rank 0's gradient arrival order.
  void RebuildFromArrivalOrder();
  void OnGradient(int parameter, const torch::Tensor& grad);
  // Starts the all-reduce of every complete bucket whose predecessors have
  // started: collectives must be issued in the same order on every rank.
  void LaunchInOrder();
  void Launch(Bucket& bucket);

  std::vector<torch::Tensor> parameters_;
  Communicator& communicator_;  // the group's data plane
  ControlPlane& control_;
  SynchronizerOptions options_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  bool syncing_ = false;
  bool rebuilt_ = false;
  std::vector<int> arrival_;
  std::vector<std::pair<int, unsigned>>
      hooks_;  // (parameter, hook handle)  // parameters in the order their gradients came, first synced step
  size_t next_launch_ = 0;
  int launched_early_ = 0;
  std::mutex mutex_;
};

}  // namespace docmatch::dist
