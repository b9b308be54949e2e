// train::Autocast: "bf16" runs matrix products in bfloat16 while the guard
// lives and restores the previous state after; an optimizer step under it
// keeps float32 weights and lands close to the float32 step.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <cmath>

#include "model/losses.h"
#include "train/autocast.h"
#include "train/optimizer.h"

namespace docmatch::train {
namespace {

TEST(Autocast, Bf16CastsMatrixProductsOnlyWhileAlive) {
  torch::manual_seed(3);
  torch::nn::Linear linear(8, 4);
  const torch::Tensor x = torch::randn({2, 8});
  {
    const Autocast guard(torch::kCPU, Precision::kBf16);
    EXPECT_EQ(linear(x).scalar_type(), torch::kBFloat16);
    EXPECT_EQ(linear->weight.scalar_type(), torch::kFloat);
  }
  EXPECT_EQ(linear(x).scalar_type(), torch::kFloat);
  {
    const Autocast guard(torch::kCPU, Precision::kFp32);
    EXPECT_EQ(linear(x).scalar_type(), torch::kFloat);
  }
  EXPECT_THROW(ParsePrecision("fp8"), std::invalid_argument);  // the CLI's parse: no third value reaches a guard
  EXPECT_EQ(ParsePrecision(Name(Precision::kBf16)), Precision::kBf16);
  EXPECT_EQ(ParseOnNonFinite(Name(OnNonFinite::kSkip)), OnNonFinite::kSkip);
}

// The similarity logits of the contrastive losses are computed in float32
// under bf16 autocast: the losses equal their float64 values to float32
// rounding (rounded to bf16, the logits at temperature 0.05 would err by
// about 0.04 each, and the loss by far more than 1e-5).
TEST(Autocast, ContrastiveLogitsStayFloat32UnderBf16) {
  torch::manual_seed(11);
  const torch::Tensor queries = torch::randn({8, 64}), candidates = torch::randn({24, 64});
  const torch::Tensor positive = torch::arange(8, torch::kLong);
  const torch::Tensor excluded = torch::zeros({8, 24}, torch::kBool);
  const model::Temperature temperature(0.05);
  const auto losses = [&](const torch::Tensor& q, const torch::Tensor& c) {
    torch::Tensor scores;
    const double pair =
        model::ContrastivePairLoss(q, c, positive, excluded, temperature, /*sum=*/false, &scores).item<double>();
    const double split = model::DocSplitLoss(q, c, positive + 8, positive, 0.05, /*sum=*/false).item<double>();
    const double block = model::SentenceBlockLoss(q, c, positive, /*sum=*/false).item<double>();
    return std::array<double, 3>{pair, split, block};
  };
  const auto reference = losses(queries.to(torch::kFloat64), candidates.to(torch::kFloat64));
  std::array<double, 3> mixed{};
  {
    const Autocast guard(torch::kCPU, Precision::kBf16);
    mixed = losses(queries, candidates);
  }
  for (size_t i = 0; i < mixed.size(); ++i) {
    EXPECT_NEAR(mixed[i], reference[i], 1e-5 * std::max(1.0, std::abs(reference[i]))) << "loss " << i;
  }
  // The same products in bf16 differ by far more: the check above can fail.
  const torch::Tensor rounded = torch::matmul(torch::nn::functional::normalize(queries).to(torch::kBFloat16),
                                              torch::nn::functional::normalize(candidates).to(torch::kBFloat16).t());
  const torch::Tensor exact = torch::matmul(torch::nn::functional::normalize(queries.to(torch::kFloat64)),
                                            torch::nn::functional::normalize(candidates.to(torch::kFloat64)).t());
  EXPECT_GT(((rounded.to(torch::kFloat64) - exact) / 0.05).abs().max().item<double>(), 1e-2);
}

// One AdamW step of a small regression net in each precision from the same
// weights: the bf16 loss is within bfloat16 rounding of the float32 one but
// not equal, and the updated weights stay float32 and near the float32 ones.
TEST(Autocast, Bf16StepKeepsFloat32MasterWeights) {
  const auto make = [] {
    torch::manual_seed(5);
    return torch::nn::Sequential(torch::nn::Linear(16, 32), torch::nn::Tanh(), torch::nn::Linear(32, 1));
  };
  torch::manual_seed(6);
  const torch::Tensor x = torch::randn({64, 16}), y = torch::randn({64, 1});
  OptimizerOptions options;
  options.lr = 1e-2;
  options.warmup_steps = 0;
  std::vector<double> losses;
  std::vector<torch::nn::Sequential> nets;
  for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
    torch::nn::Sequential net = make();
    auto optimizer = MakeAdamW(*net, options);
    torch::Tensor loss;
    {
      const Autocast guard(torch::kCPU, precision);
      loss = torch::mse_loss(net->forward(x).to(torch::kFloat), y);
    }
    loss.backward();
    optimizer->step();
    losses.push_back(loss.item<double>());
    nets.push_back(net);
  }
  EXPECT_NE(losses[0], losses[1]);
  EXPECT_NEAR(losses[0], losses[1], 0.01 * losses[0]);
  // AdamW's first step moves each weight by about lr in the gradient's sign:
  // bf16 gradients may flip the sign of a few near-zero ones (2 lr apart),
  // most weights must land where the float32 step put them.
  const auto a = nets[0]->parameters(), b = nets[1]->parameters();
  int64_t flipped = 0, total = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].scalar_type(), torch::kFloat);
    const torch::Tensor gap = (a[i] - b[i]).abs();
    EXPECT_LE(gap.max().item<double>(), 2.01 * options.lr);
    flipped += (gap > options.lr).sum().item<int64_t>();
    total += gap.numel();
  }
  EXPECT_LT(flipped, total / 20) << flipped << " of " << total << " weights moved the other way";
}

}  // namespace
}  // namespace docmatch::train
