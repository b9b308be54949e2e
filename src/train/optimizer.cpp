#include "train/optimizer.h"

#include <algorithm>

namespace docmatch::train {

double LearningRate(const OptimizerOptions& o, int64_t step) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  const double remaining = static_cast<double>(o.total_steps - step);
  const double span = static_cast<double>(std::max<int64_t>(1, o.total_steps - o.warmup_steps));
  return o.lr * std::max(0.0, remaining / span);
}

std::unique_ptr<torch::optim::AdamW> MakeAdamW(const torch::nn::Module& module, const OptimizerOptions& options) {
  std::vector<torch::Tensor> decayed, plain;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    const std::string& name = p.key();
    const bool no_decay = p.value().dim() < 2 || name.find("norm") != std::string::npos;
    (no_decay ? plain : decayed).push_back(p.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decayed, std::make_unique<torch::optim::AdamWOptions>(
                                   torch::optim::AdamWOptions(options.lr).weight_decay(options.weight_decay)));
  groups.emplace_back(
      plain, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(options.lr).weight_decay(0)));
  return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(options.lr));
}

void SetLearningRate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace docmatch::train
