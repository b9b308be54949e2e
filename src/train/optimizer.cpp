// Parameter groups for weight decay, the warm-up / decay schedule, FusedAdamW and
// ClipGradientNorm (optimizer.h).
#include "train/optimizer.h"

#include <ATen/Context.h>
#include <stdlib.h>

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>

#include "console/error.h"

namespace docmatch::train {

const char* Name(Precision precision) { return precision == Precision::kBf16 ? "bf16" : "fp32"; }
const char* Name(OnNonFinite on_nonfinite) { return on_nonfinite == OnNonFinite::kSkip ? "skip" : "stop"; }

Precision ParsePrecision(const std::string& text) {
  if (text == "fp32") return Precision::kFp32;
  if (text == "bf16") return Precision::kBf16;
  throw std::invalid_argument("--precision is fp32 or bf16, not '" + text + "'");
}

OnNonFinite ParseOnNonFinite(const std::string& text) {
  if (text == "stop") return OnNonFinite::kStop;
  if (text == "skip") return OnNonFinite::kSkip;
  throw std::invalid_argument("--on-nonfinite is stop or skip, not '" + text + "'");
}

void UseDeterministicAlgorithms(bool on) {
  if (on) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(on, /*warn_only=*/false);
  at::globalContext().setDeterministicCuDNN(on);
  if (on) at::globalContext().setBenchmarkCuDNN(false);
}

double LearningRate(const OptimizerOptions& o, int64_t step) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  const double remaining = static_cast<double>(o.total_steps - step);
  const double span = static_cast<double>(std::max<int64_t>(1, o.total_steps - o.warmup_steps));
  return o.lr * std::max(0.0, remaining / span);
}

std::unique_ptr<torch::optim::AdamW> MakeAdamW(const torch::nn::Module& module, const OptimizerOptions& options,
                                               const std::function<bool(const std::string&)>& lower,
                                               std::vector<bool>* lower_groups) {
  std::vector<torch::Tensor> decayed[2], plain[2];  // [upper, lower]
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    const std::string& name = p.key();
    const bool no_decay = p.value().dim() < 2 || name.find("norm") != std::string::npos;
    const int level = lower && lower(name) ? 1 : 0;
    (no_decay ? plain : decayed)[level].push_back(p.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (lower_groups) lower_groups->clear();
  for (int level : {0, 1}) {
    if (level == 1 && decayed[1].empty() && plain[1].empty()) break;
    groups.emplace_back(decayed[level], std::make_unique<torch::optim::AdamWOptions>(
                                            torch::optim::AdamWOptions(options.lr).weight_decay(options.weight_decay)));
    groups.emplace_back(plain[level], std::make_unique<torch::optim::AdamWOptions>(
                                          torch::optim::AdamWOptions(options.lr).weight_decay(0)));
    if (lower_groups) lower_groups->insert(lower_groups->end(), 2, level == 1);
  }
  return std::make_unique<FusedAdamW>(groups, torch::optim::AdamWOptions(options.lr));
}

namespace {

// The group's parameters with gradients, if one fused call can update them.
std::optional<std::vector<torch::Tensor>> FusableParameters(torch::optim::OptimizerParamGroup& group) {
  if (static_cast<torch::optim::AdamWOptions&>(group.options()).amsgrad()) return std::nullopt;
  std::vector<torch::Tensor> params;
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    const bool same = params.empty() || (p.device() == params.front().device() && p.dtype() == params.front().dtype());
    if (!same || p.grad().is_sparse() || !at::isFloatingType(p.scalar_type())) return std::nullopt;
    params.push_back(p);
  }
  return params;
}

}  // namespace

namespace {

// The fused kernel's step counts and tensor learning rate: float32 on the
// parameter's device, whatever the parameters' type (the CUDA kernel reads
// them as floats, as PyTorch's fused optimizers make them).
torch::TensorOptions StepOptions(const torch::Tensor& p) {
  return torch::TensorOptions().dtype(torch::kFloat32).device(p.device());
}

// The AdamW state of `p`, made as AdamW makes it when it has none.
torch::optim::AdamWParamState& StateOf(
    ska::flat_hash_map<void*, std::unique_ptr<torch::optim::OptimizerParamState>>& states, const torch::Tensor& p) {
  auto& slot = states[p.unsafeGetTensorImpl()];
  if (!slot) {
    auto fresh = std::make_unique<torch::optim::AdamWParamState>();
    fresh->step(0);
    fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    slot = std::move(fresh);
  }
  return static_cast<torch::optim::AdamWParamState&>(*slot);
}

}  // namespace

void FusedAdamW::MakeCapturable() {
  TORCH_CHECK(!capturable_, "a FusedAdamW is made capturable once: a graph may hold its count and lr tensors");
  for (auto& group : param_groups_) {
    const auto& options = static_cast<torch::optim::AdamWOptions&>(group.options());
    TORCH_CHECK(!options.amsgrad(), "a capturable FusedAdamW has no amsgrad");
    std::vector<torch::Tensor> stepped;
    int64_t step = -1;
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      TORCH_CHECK(stepped.empty() || (p.device() == stepped.front().device() && p.dtype() == stepped.front().dtype()),
                  "a capturable FusedAdamW's group holds parameters of one type on one device");
      TORCH_CHECK(at::isFloatingType(p.scalar_type()) && !p.grad().is_sparse(),
                  "a capturable FusedAdamW steps floating parameters with dense gradients");
      const int64_t s = StateOf(state_, p).step();
      TORCH_CHECK(step < 0 || s == step, "a capturable FusedAdamW's group shares one step count; its parameters "
                  "have taken ", step, " and ", s, " steps");
      step = s;
      stepped.push_back(p);
    }
    const bool any = !stepped.empty();
    counts_.push_back(any ? torch::full({}, static_cast<double>(step), StepOptions(stepped.front())) : torch::Tensor());
    lrs_.push_back(any ? torch::full({}, options.lr(), StepOptions(stepped.front())) : torch::Tensor());
    stepped_.push_back(std::move(stepped));
  }
  capturable_ = true;
}

void FusedAdamW::WriteLearningRates() {
  for (size_t g = 0; g < lrs_.size(); ++g) {
    if (lrs_[g].defined()) lrs_[g].fill_(static_cast<torch::optim::AdamWOptions&>(param_groups_[g].options()).lr());
  }
}

void FusedAdamW::SyncHostSteps() {
  for (size_t g = 0; g < counts_.size(); ++g) {
    if (!counts_[g].defined()) continue;
    const auto step = static_cast<int64_t>(std::llround(counts_[g].item<double>()));
    for (const auto& p : stepped_[g]) StateOf(state_, p).step(step);
  }
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  std::vector<std::vector<torch::Tensor>> fusable;  // the eager path's, per group
  if (!capturable()) {
    for (auto& group : param_groups_) {
      auto params = FusableParameters(group);
      if (!params) return AdamW::step(std::move(closure));
      fusable.push_back(std::move(*params));
    }
  }
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  if (capturable()) {
    for (size_t g = 0; g < param_groups_.size(); ++g) {
      const std::vector<torch::Tensor>& params = stepped_[g];
      if (params.empty()) continue;
      const auto& options = static_cast<torch::optim::AdamWOptions&>(param_groups_[g].options());
      std::vector<torch::Tensor> grads, exp_avgs, exp_avg_sqs;
      for (const auto& p : params) {
        TORCH_CHECK(p.grad().defined(), "a capturable FusedAdamW steps the parameters that had a gradient when it "
                    "was made capturable, at every step; one has none now");
        auto& state = StateOf(state_, p);
        grads.push_back(p.grad());
        exp_avgs.push_back(state.exp_avg());
        exp_avg_sqs.push_back(state.exp_avg_sq());
      }
      counts_[g].add_(1);
      const std::vector<torch::Tensor> steps(params.size(), counts_[g]);
      at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lrs_[g],
                        std::get<0>(options.betas()), std::get<1>(options.betas()), options.weight_decay(),
                        options.eps(), /*amsgrad=*/false, /*maximize=*/false);
    }
    return loss;
  }
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    const std::vector<torch::Tensor>& params = fusable[g];
    if (params.empty()) continue;
    const auto& options = static_cast<torch::optim::AdamWOptions&>(param_groups_[g].options());
    std::vector<torch::Tensor> grads, exp_avgs, exp_avg_sqs, steps;
    std::map<int64_t, torch::Tensor> step_tensors;  // one scalar per distinct step count
    for (const auto& p : params) {
      auto& state = StateOf(state_, p);
      state.step(state.step() + 1);
      torch::Tensor& count = step_tensors[state.step()];
      if (!count.defined()) count = torch::full({}, static_cast<double>(state.step()), StepOptions(p));
      grads.push_back(p.grad());
      exp_avgs.push_back(state.exp_avg());
      exp_avg_sqs.push_back(state.exp_avg_sq());
      steps.push_back(count);
    }
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, options.lr(),
                      std::get<0>(options.betas()), std::get<1>(options.betas()), options.weight_decay(), options.eps(),
                      /*amsgrad=*/false, /*maximize=*/false);
  }
  return loss;
}

namespace {
std::vector<torch::Tensor> Gradients(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  return grads;
}
torch::Tensor Norm(const std::vector<torch::Tensor>& grads) {
  return grads.empty() ? torch::zeros({}) : torch::stack(at::_foreach_norm(grads, 2)).norm();
}
}  // namespace

torch::Tensor GradientNorm(const std::vector<torch::Tensor>& parameters) { return Norm(Gradients(parameters)); }

torch::Tensor ClipGradientNorm(const std::vector<torch::Tensor>& parameters, double max_norm) {
  std::vector<torch::Tensor> grads = Gradients(parameters);
  if (grads.empty()) return torch::zeros({});
  const torch::Tensor total = Norm(grads);
  // The same coefficient as clip_grad_norm_: max_norm / (norm + 1e-6), at most 1.
  const torch::Tensor coefficient = (max_norm / (total + 1e-6)).clamp_max(1.0);
  at::_foreach_mul_(grads, coefficient);
  return total;
}

void SetLearningRate(torch::optim::Optimizer& optimizer, double lr, const std::vector<double>& factors) {
  auto& groups = optimizer.param_groups();
  DOCMATCH_CHECK(factors.empty() || factors.size() == groups.size(), "train", factors.size(),
                 " learning-rate factors for ", groups.size(), " parameter groups");
  for (size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(factors.empty() ? lr : lr * factors[g]);
  if (auto* fused = dynamic_cast<FusedAdamW*>(&optimizer); fused != nullptr && fused->capturable())
    fused->WriteLearningRates();
}

}  // namespace docmatch::train
