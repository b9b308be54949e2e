// The synchronizer's buckets, gradient hooks, in-order all-reduce launches and
// Finalize (gradient_synchronizer.h).
#include "dist/gradient_synchronizer.h"

#include <glog/logging.h>

#include "console/error.h"

namespace docmatch::dist {

GradientSynchronizer::GradientSynchronizer(std::vector<torch::Tensor> parameters, ProcessGroup& group,
                                           SynchronizerOptions options)
    : parameters_(std::move(parameters)), communicator_(group.data()), control_(group.control()), options_(options) {
  // One rank: autograd's own accumulation is the average, so no buckets, no
  // hooks and no collectives (at 1 rank on a GPU they were about 3 kernels per
  // parameter and a third of the step; bench/NOTES.md, issue 37).
  if (communicator_.size() == 1) return;
  // Until the first step shows the real order: reverse registration order,
  // since the last layers' gradients tend to arrive first.
  std::vector<int> order;
  for (int p = static_cast<int>(parameters_.size()) - 1; p >= 0; --p) {
    if (parameters_[p].requires_grad()) order.push_back(p);
  }
  BuildBuckets(order);
  for (int p : order) {
    hooks_.emplace_back(p, parameters_[p].register_hook([this, p](torch::Tensor grad) { OnGradient(p, grad); }));
  }
}

GradientSynchronizer::~GradientSynchronizer() {
  for (const auto& [p, hook] : hooks_) parameters_[p].remove_hook(hook);
}

void GradientSynchronizer::BuildBuckets(const std::vector<int>& order) {
  buckets_.clear();
  slots_.assign(parameters_.size(), Slot{-1, -1, 0, 0});
  int64_t bucket_bytes = 0;
  for (int p : order) {
    const int64_t bytes = parameters_[p].numel() * parameters_[p].element_size();
    if (buckets_.empty() || (bucket_bytes > 0 && bucket_bytes + bytes > options_.bucket_bytes)) {
      buckets_.emplace_back();
      bucket_bytes = 0;
    }
    Bucket& bucket = buckets_.back();
    const int64_t offset = bucket.parameters.empty()
                               ? 0
                               : slots_[bucket.parameters.back()].offset + slots_[bucket.parameters.back()].numel;
    slots_[p] = {static_cast<int>(buckets_.size()) - 1, static_cast<int>(bucket.parameters.size()), offset,
                 parameters_[p].numel()};
    bucket.parameters.push_back(p);
    bucket_bytes += bytes;
  }
  for (Bucket& bucket : buckets_) {
    const Slot& last = slots_[bucket.parameters.back()];
    const int64_t numel = last.offset + last.numel;
    // The parameters' own dtype (fp32 master weights in training, fp64 in the tests).
    bucket.buffer = torch::zeros({numel}, parameters_[bucket.parameters.front()].options());
    bucket.filled.assign(bucket.parameters.size(), false);
  }
}

void GradientSynchronizer::RebuildFromArrivalOrder() {
  // Rank 0's order for everyone: collectives must pair up bucket by bucket.
  // Host values on the control plane: an order is metadata, not device data.
  std::vector<int64_t> order(parameters_.size(), -1);
  for (size_t i = 0; i < arrival_.size(); ++i) order[i] = arrival_[i];
  control_.Broadcast(order, /*root=*/0);
  std::vector<int> rebuilt;
  std::vector<bool> seen(parameters_.size(), false);
  for (size_t i = 0; i < order.size() && order[i] >= 0; ++i) {
    const int p = static_cast<int>(order[i]);
    rebuilt.push_back(p);
    seen[p] = true;
  }
  // Unused so far: last. Every parameter with a hook keeps its slot, one whose
  // requires_grad is off just now too (finetune --freeze-sentence-steps turns
  // it off for the first steps): its gradients come once it is on again.
  std::vector<bool> hooked(parameters_.size(), false);
  for (const auto& [p, hook] : hooks_) hooked[p] = true;
  for (int p = static_cast<int>(parameters_.size()) - 1; p >= 0; --p) {
    if (!seen[p] && hooked[p]) rebuilt.push_back(p);
  }
  BuildBuckets(rebuilt);
  rebuilt_ = true;
  if (communicator_.rank() == 0 && communicator_.size() > 1) {
    int64_t bytes = 0;
    for (const Bucket& bucket : buckets_) bytes += bucket.buffer.numel() * bucket.buffer.element_size();
    LOG(INFO) << "[dist] gradient sync: " << buckets_.size() << " buckets for " << bytes / 1048576.0
              << " MB of gradient (up to " << options_.bucket_bytes / 1048576.0 << " MB each), all-reduced in "
              << (options_.bf16 ? "bf16" : "the parameters' dtype") << " as backward fills them";
  }
}

void GradientSynchronizer::BroadcastParameters() {
  if (communicator_.size() == 1) return;
  torch::NoGradGuard no_grad;
  for (torch::Tensor& parameter : parameters_) {
    torch::Tensor flat = parameter.detach().contiguous();
    communicator_.Broadcast(flat, /*root=*/0);
    if (!flat.is_same(parameter)) parameter.detach().copy_(flat);
  }
}

void GradientSynchronizer::Prepare(bool sync) {
  std::lock_guard<std::mutex> lock(mutex_);
  syncing_ = sync;
  launched_early_ = 0;
  next_launch_ = 0;
  for (Bucket& bucket : buckets_) {
    DOCMATCH_CHECK(!bucket.work, "dist", "GradientSynchronizer: Prepare() before the previous Finalize()");
    bucket.ready = 0;
    bucket.complete = false;
    std::fill(bucket.filled.begin(), bucket.filled.end(), false);
  }
}

void GradientSynchronizer::OnGradient(int parameter, const torch::Tensor& grad) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!syncing_) return;
  const Slot& slot = slots_[parameter];
  Bucket& bucket = buckets_[slot.bucket];
  const int position = slot.position;
  if (bucket.filled[position]) return;  // one hook call per parameter and backward
  if (!rebuilt_) arrival_.push_back(parameter);
  torch::NoGradGuard no_grad;
  // This micro-step's gradient plus what earlier micro-steps accumulated.
  torch::Tensor total = grad;
  const torch::Tensor& accumulated = parameters_[parameter].grad();
  if (accumulated.defined()) total = total + accumulated;
  bucket.buffer.slice(0, slot.offset, slot.offset + slot.numel).copy_(total.reshape(-1));
  bucket.filled[position] = true;
  if (++bucket.ready == static_cast<int>(bucket.parameters.size())) {
    bucket.complete = true;
    LaunchInOrder();
  }
  // Keep the reductions already in flight moving while backward goes on.
  for (size_t b = 0; b < next_launch_; ++b) {
    if (buckets_[b].work) buckets_[b].work->Progress();
  }
}

void GradientSynchronizer::LaunchInOrder() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].complete) {
    Launch(buckets_[next_launch_++]);
    ++launched_early_;
  }
}

void GradientSynchronizer::Launch(Bucket& bucket) {
  bucket.wire = options_.bf16 ? bucket.buffer.to(torch::kBFloat16) : bucket.buffer;
  bucket.work = communicator_.AllReduceAsync(bucket.wire);
}

void GradientSynchronizer::Finalize() {
  std::lock_guard<std::mutex> lock(mutex_);
  DOCMATCH_CHECK(syncing_, "dist", "GradientSynchronizer: Finalize() after a Prepare(/*sync=*/false) backward");
  if (communicator_.size() == 1) {
    syncing_ = false;
    return;
  }
  torch::NoGradGuard no_grad;
  // Which parameters got a gradient on this rank (this step or an earlier
  // micro-step); summed over ranks below, on the host.
  std::vector<int64_t> used(parameters_.size(), 0);
  for (const Bucket& bucket : buckets_) {
    for (size_t i = 0; i < bucket.parameters.size(); ++i) {
      const int p = bucket.parameters[i];
      used[p] = bucket.filled[i] || parameters_[p].grad().defined() ? 1 : 0;
    }
  }
  // Buckets with parameters this step did not reach: their part is the
  // accumulated gradient if any, else zero, so every rank reduces the same buckets.
  for (; next_launch_ < buckets_.size(); ++next_launch_) {
    Bucket& bucket = buckets_[next_launch_];
    for (size_t i = 0; i < bucket.parameters.size(); ++i) {
      if (bucket.filled[i]) continue;
      const int p = bucket.parameters[i];
      const Slot& slot = slots_[p];
      torch::Tensor part = bucket.buffer.slice(0, slot.offset, slot.offset + slot.numel);
      const torch::Tensor& accumulated = parameters_[p].grad();
      if (accumulated.defined()) {
        part.copy_(accumulated.reshape(-1));
      } else {
        part.zero_();
      }
    }
    Launch(bucket);
  }
  control_.Sum(used);  // while the last buckets travel
  const double world = communicator_.size();
  for (Bucket& bucket : buckets_) {
    bucket.work->Wait();
    bucket.work.reset();
    if (options_.bf16) bucket.buffer.copy_(bucket.wire);
    bucket.buffer.div_(world);
    for (int p : bucket.parameters) {
      const Slot& slot = slots_[p];
      torch::Tensor& parameter = parameters_[p];
      if (used[p] == 0) {  // no rank's loss reached it: no gradient, as in one process
        parameter.mutable_grad() = torch::Tensor();
        continue;
      }
      const torch::Tensor average = bucket.buffer.slice(0, slot.offset, slot.offset + slot.numel).view_as(parameter);
      if (parameter.grad().defined()) {
        parameter.mutable_grad().copy_(average);
      } else {
        parameter.mutable_grad() = average.to(parameter.dtype()).clone();
      }
    }
  }
  syncing_ = false;
  if (!rebuilt_) RebuildFromArrivalOrder();
}

}  // namespace docmatch::dist
