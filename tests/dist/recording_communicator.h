// A data plane for the tests that records every tensor handed to it and
// forwards the collective to a real one: each operation's name, and every
// tensor of a dtype outside `allowed` or on another device than the run's.
// A run through it shows which collectives a step exercised, and that none
// carried metadata (a host int64 order tensor crashed the first NCCL step,
// issue 37), on this CPU machine.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace docmatch::dist::testing {

class RecordingCommunicator : public Communicator {
 public:
  RecordingCommunicator(std::unique_ptr<Communicator> inner, std::set<torch::ScalarType> allowed)
      : Communicator(inner->device()), inner_(std::move(inner)), allowed_(std::move(allowed)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Backend backend() const override { return inner_->backend(); }
  WorkHandle BarrierAsync() override { return inner_->BarrierAsync(); }

  std::set<std::string> operations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return operations_;
  }
  std::vector<std::string> violations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return violations_;
  }
  int64_t tensors() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return tensors_;
  }

 protected:
  WorkHandle DoAllReduce(torch::Tensor tensor) override {
    Record("all_reduce", {tensor});
    return inner_->AllReduceAsync(tensor);
  }
  WorkHandle DoAllGather(torch::Tensor input, torch::Tensor output) override {
    Record("all_gather", {input, output});
    return inner_->AllGatherAsync(input, output);
  }
  WorkHandle DoAllGatherUneven(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) override {
    Record("all_gather (uneven)", {input, output});
    return inner_->AllGatherUnevenAsync(input, output, counts);
  }
  WorkHandle DoReduceScatterUneven(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) override {
    Record("reduce_scatter", {input, output});
    return inner_->ReduceScatterUnevenAsync(input, output, counts);
  }
  WorkHandle DoBroadcast(torch::Tensor tensor, int root) override {
    Record("broadcast", {tensor});
    return inner_->BroadcastAsync(tensor, root);
  }

 private:
  void Record(const std::string& op, const std::vector<torch::Tensor>& tensors) {
    std::lock_guard<std::mutex> lock(mutex_);
    operations_.insert(op);
    for (const torch::Tensor& t : tensors) {
      ++tensors_;
      if (allowed_.count(t.scalar_type()) && t.device() == device()) continue;
      std::ostringstream what;
      what << op << " of " << t.scalar_type() << " on " << t.device();
      violations_.push_back(what.str());
    }
  }

  std::unique_ptr<Communicator> inner_;
  std::set<torch::ScalarType> allowed_;
  mutable std::mutex mutex_;
  std::set<std::string> operations_;
  std::vector<std::string> violations_;
  int64_t tensors_ = 0;
};

}  // namespace docmatch::dist::testing
