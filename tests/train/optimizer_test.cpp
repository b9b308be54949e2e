// FusedAdamW against torch::optim::AdamW (the per-parameter loop it replaces)
// over several steps of two parameter groups in float64, including a
// checkpoint of the fused optimizer's state loaded into a plain AdamW; and
// ClipGradientNorm against torch::nn::utils::clip_grad_norm_, clipping and not.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>

#include "train/optimizer.h"

namespace docmatch::train {
namespace {

// Two groups as MakeAdamW builds them: decayed weights, undecayed biases.
std::vector<torch::Tensor> Parameters(uint64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({5, 4}, torch::kFloat64).requires_grad_(), torch::randn({4}, torch::kFloat64).requires_grad_(),
          torch::randn({3, 5}, torch::kFloat64).requires_grad_()};
}

template <typename Optimizer>
std::unique_ptr<Optimizer> Make(const std::vector<torch::Tensor>& p) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{p[0], p[2]},
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.01).weight_decay(0.1)));
  groups.emplace_back(std::vector<torch::Tensor>{p[1]},
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.02).weight_decay(0)));
  return std::make_unique<Optimizer>(groups, torch::optim::AdamWOptions(0.01));
}

// Gradients that change every step (a fixed function of the parameters).
void Backward(const std::vector<torch::Tensor>& p) {
  for (const auto& t : p) t.mutable_grad() = torch::Tensor();
  ((p[0].sin() * 3).sum() + (p[1] * p[1]).sum() + (p[2].exp() - 1).pow(2).sum()).backward();
}

void ExpectSame(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, const std::string& when) {
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-12, 1e-13)) << when << ", parameter " << i;
  }
}

TEST(Optimizer, FusedAdamWEqualsTheAdamWLoopAndSharesItsCheckpoints) {
  const std::vector<torch::Tensor> fused_params = Parameters(4), loop_params = Parameters(4);
  const std::vector<torch::Tensor> initial = Parameters(4);
  auto fused = Make<FusedAdamW>(fused_params);
  auto loop = Make<torch::optim::AdamW>(loop_params);
  for (int step = 0; step < 4; ++step) {
    Backward(fused_params);
    Backward(loop_params);
    fused->step();
    loop->step();
    ExpectSame(fused_params, loop_params, "step " + std::to_string(step));
  }
  EXPECT_FALSE(torch::allclose(fused_params[0], initial[0])) << "the steps changed nothing";

  // The fused optimizer's state, saved and loaded into a plain AdamW, carries on identically.
  std::stringstream buffer;
  {
    torch::serialize::OutputArchive archive;
    fused->save(archive);
    archive.save_to(buffer);
  }
  const std::vector<torch::Tensor> resumed_params = {fused_params[0].detach().clone().requires_grad_(),
                                                     fused_params[1].detach().clone().requires_grad_(),
                                                     fused_params[2].detach().clone().requires_grad_()};
  auto resumed = Make<torch::optim::AdamW>(resumed_params);
  {
    torch::serialize::InputArchive archive;
    archive.load_from(buffer);
    resumed->load(archive);
  }
  for (int step = 0; step < 2; ++step) {
    Backward(fused_params);
    Backward(resumed_params);
    fused->step();
    resumed->step();
    ExpectSame(fused_params, resumed_params, "after the checkpoint, step " + std::to_string(step));
  }
}

TEST(Optimizer, ClipGradientNormEqualsClipGradNorm) {
  for (double max_norm : {0.5, 1e6}) {  // clipped, and left alone
    const std::vector<torch::Tensor> a = Parameters(9), b = Parameters(9);
    Backward(a);
    Backward(b);
    const double expected = torch::nn::utils::clip_grad_norm_(b, max_norm);
    EXPECT_NEAR(ClipGradientNorm(a, max_norm).item<double>(), expected, 1e-12 * expected);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::allclose(a[i].grad(), b[i].grad(), 1e-13, 1e-15)) << "max_norm " << max_norm << " " << i;
    }
    if (max_norm == 0.5) {
      double norm = 0;
      for (const auto& t : a) norm += t.grad().pow(2).sum().item<double>();
      EXPECT_NEAR(std::sqrt(norm), 0.5, 1e-6);
    }
  }
}

}  // namespace
}  // namespace docmatch::train
