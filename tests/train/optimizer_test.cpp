// FusedAdamW against torch::optim::AdamW (the per-parameter loop it replaces)
// over several steps of two parameter groups in float64, including a
// checkpoint of the fused optimizer's state loaded into a plain AdamW; and
// ClipGradientNorm against torch::nn::utils::clip_grad_norm_, clipping and not;
// the captured update (train/captured_step.h) against the loop's eager one.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <sstream>

#include "train/captured_step.h"
#include "train/optimizer.h"

namespace docmatch::train {
namespace {

// Two groups as MakeAdamW builds them: decayed weights, undecayed biases
// (and p[3], if given, which the Backward below never reaches).
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
  std::vector<torch::Tensor> undecayed{p[1]};
  if (p.size() > 3) undecayed.push_back(p[3]);
  groups.emplace_back(undecayed,
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.02).weight_decay(0)));
  return std::make_unique<Optimizer>(groups, torch::optim::AdamWOptions(0.01));
}

// Gradients that change every step (a fixed function of the parameters).
torch::Tensor Loss(const std::vector<torch::Tensor>& p) {
  return (p[0].sin() * 3).sum() + (p[1] * p[1]).sum() + (p[2].exp() - 1).pow(2).sum();
}
void Backward(const std::vector<torch::Tensor>& p) {
  for (const auto& t : p) t.mutable_grad() = torch::Tensor();
  Loss(p).backward();
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

// Capturable steps (counts and learning rates in tensors, nothing on the
// host): after an eager step, four with the lr changed before each equal the
// host-counted optimizer's; the synced host steps are its, and a checkpoint
// then carries on in a plain AdamW as the eager one's does.
TEST(Optimizer, CapturableStepsEqualTheHostCountedOnesAndSyncBack) {
  const std::vector<torch::Tensor> a = Parameters(5), b = Parameters(5);
  auto capturable = Make<FusedAdamW>(a);
  auto eager = Make<FusedAdamW>(b);
  Backward(a);
  Backward(b);
  capturable->step();
  eager->step();
  capturable->MakeCapturable();
  ASSERT_TRUE(capturable->capturable());
  for (int step = 0; step < 4; ++step) {
    SetLearningRate(*capturable, (step + 1) / 128.0, {1.0, 2.0});
    SetLearningRate(*eager, (step + 1) / 128.0, {1.0, 2.0});
    Backward(a);
    Backward(b);
    capturable->step();
    eager->step();
    ExpectSame(a, b, "capturable step " + std::to_string(step));
  }
  for (const auto& p : a) {  // the host state stays where MakeCapturable found it until synced
    EXPECT_EQ(static_cast<torch::optim::AdamWParamState&>(*capturable->state().at(p.unsafeGetTensorImpl())).step(), 1);
  }
  capturable->SyncHostSteps();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(static_cast<torch::optim::AdamWParamState&>(*capturable->state().at(a[i].unsafeGetTensorImpl())).step(),
              static_cast<torch::optim::AdamWParamState&>(*eager->state().at(b[i].unsafeGetTensorImpl())).step());
  }
  std::stringstream buffer;
  {
    torch::serialize::OutputArchive archive;
    capturable->save(archive);
    archive.save_to(buffer);
  }
  const std::vector<torch::Tensor> resumed_params = {a[0].detach().clone().requires_grad_(),
                                                     a[1].detach().clone().requires_grad_(),
                                                     a[2].detach().clone().requires_grad_()};
  auto resumed = Make<torch::optim::AdamW>(resumed_params);
  {
    torch::serialize::InputArchive archive;
    archive.load_from(buffer);
    resumed->load(archive);
  }
  SetLearningRate(*resumed, 0.05, {1.0, 2.0});
  SetLearningRate(*eager, 0.05, {1.0, 2.0});
  Backward(resumed_params);
  Backward(b);
  resumed->step();
  eager->step();
  ExpectSame(resumed_params, b, "after the synced checkpoint");
}

// Two levels (SMITH's sentence-block encoder under its document layers):
// MakeAdamW puts the lower level's parameters in groups of their own, and
// their lr factor scales their first AdamW step (lr x m/(sqrt(v)+eps) and the
// decoupled decay, both linear in lr) while the upper level's step stays as
// it was; factor 0 leaves them as they were, bit for bit.
TEST(Optimizer, TheLowerLevelTakesItsOwnLearningRate) {
  struct Net : torch::nn::Module {
    Net() {
      lower = register_module("lower", torch::nn::Linear(4, 4));
      upper = register_module("upper", torch::nn::Linear(4, 2));
    }
    torch::nn::Linear lower{nullptr}, upper{nullptr};
  };
  auto is_lower = [](const std::string& name) { return name.rfind("lower.", 0) == 0; };
  OptimizerOptions options;
  options.lr = 0.01;
  std::map<double, std::shared_ptr<Net>> nets;
  torch::Tensor lower0, upper0;
  for (double factor : {1.0, 0.5, 0.0}) {
    torch::manual_seed(9);
    auto net = std::make_shared<Net>();
    net->to(torch::kFloat64);
    if (factor == 1.0) lower0 = net->lower->weight.detach().clone(), upper0 = net->upper->weight.detach().clone();
    std::vector<bool> lower_groups;
    auto optimizer = MakeAdamW(*net, options, is_lower, &lower_groups);
    ASSERT_EQ(lower_groups, (std::vector<bool>{false, false, true, true}));
    ASSERT_EQ(optimizer->param_groups()[2].params().size(), 1u);  // lower.weight (decayed)
    EXPECT_TRUE(optimizer->param_groups()[2].params()[0].is_same(net->lower->weight));
    const torch::Tensor x = torch::randn({3, 4}, torch::kFloat64);
    net->upper(torch::tanh(net->lower(x))).pow(2).sum().backward();
    SetLearningRate(*optimizer, options.lr, {1.0, 1.0, factor, factor});
    optimizer->step();
    nets[factor] = net;
  }
  EXPECT_TRUE(torch::equal(nets[0.0]->lower->weight, lower0)) << "a frozen level moved";
  const torch::Tensor full = nets[1.0]->lower->weight - lower0, half = nets[0.5]->lower->weight - lower0;
  EXPECT_GT(full.abs().max().item<double>(), 1e-4);
  EXPECT_TRUE(torch::allclose(half, 0.5 * full, 1e-9, 1e-12));
  for (double factor : {0.5, 0.0}) {
    EXPECT_TRUE(torch::equal(nets[factor]->upper->weight, nets[1.0]->upper->weight)) << factor;
  }
  EXPECT_FALSE(torch::equal(nets[1.0]->upper->weight, upper0));
  // Without a lower level: the two groups of old.
  std::vector<bool> lower_groups;
  EXPECT_EQ(MakeAdamW(*nets[1.0], options, nullptr, &lower_groups)->param_groups().size(), 2u);
  EXPECT_EQ(lower_groups, (std::vector<bool>{false, false}));
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


// The captured update's (CapturedOptimizerStep) `updates` against the loop's
// eager one (ClipGradientNorm at `max_norm`, or only the norm at 0;
// FusedAdamW; gradients dropped) on `device` in float64, the lr changed
// before each (values exact in float32, as the lr tensors hold them): the same norms and
// parameters; gradients zeroed in place (the tensors the next backward
// accumulates into); p[3], which no backward reaches, never stepped and
// without state; the step counts synced back the eager optimizer's.
void ExpectTheCapturedUpdateIsTheEagerOne(const torch::Device& device, bool capture, int updates, double max_norm) {
  std::vector<torch::Tensor> a = Parameters(6), b = Parameters(6);
  for (auto* p : {&a, &b}) {
    torch::manual_seed(7);
    p->push_back(torch::randn({2}, torch::kFloat64).requires_grad_());
    for (auto& t : *p) t = t.detach().to(device).requires_grad_();
  }
  const torch::Tensor unreached = a[3].detach().clone();
  auto graphed = Make<FusedAdamW>(a);
  auto eager = Make<FusedAdamW>(b);
  CapturedOptimizerStep update(*graphed, a, a, device, {max_norm, capture});
  std::vector<const void*> storage;  // the gradients' memory after the first update
  bool clipped = false;
  for (int step = 0; step < updates; ++step) {
    const std::string when = "update " + std::to_string(step);
    SetLearningRate(*graphed, (step + 1) / 128.0, {1.0, 2.0});
    SetLearningRate(*eager, (step + 1) / 128.0, {1.0, 2.0});
    Loss(a).backward();  // into the zeroed gradients after the first update
    Backward(b);
    const double norm = update.Step().item<double>();
    const double expected = (max_norm > 0 ? ClipGradientNorm(b, max_norm) : GradientNorm(b)).item<double>();
    eager->step();
    eager->zero_grad();
    EXPECT_NEAR(norm, expected, 1e-12 * expected) << when;
    clipped |= expected > max_norm;
    ExpectSame(a, b, when);
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(a[i].grad().defined()) << when;
      EXPECT_EQ(a[i].grad().abs().max().item<double>(), 0.0) << when << ": gradient " << i << " not zeroed";
      if (step == 0) storage.push_back(a[i].grad().data_ptr());
      EXPECT_EQ(a[i].grad().data_ptr(), storage[i]) << when << ": gradient " << i << " replaced, not zeroed";
    }
    EXPECT_FALSE(a[3].grad().defined()) << when;
  }
  if (max_norm > 0) EXPECT_TRUE(clipped) << "no update clipped: the test does not check clipping";
  EXPECT_TRUE(torch::equal(a[3], unreached)) << "a parameter without gradient moved";
  EXPECT_EQ(graphed->state().count(a[3].unsafeGetTensorImpl()), 0u) << "a parameter without gradient got state";
  update.SyncHostSteps();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(static_cast<torch::optim::AdamWParamState&>(*graphed->state().at(a[i].unsafeGetTensorImpl())).step(),
              updates);
  }
  EXPECT_EQ(update.captures(), capture && device.is_cuda());
  EXPECT_EQ(update.replays(), update.captures() ? updates - 1 : 0) << "one eager update, then the graph's";
  // A gradient replaced (new memory) is refused, not silently missed.
  a[0].mutable_grad() = torch::zeros_like(a[0]);
  EXPECT_THROW(update.Step(), c10::Error);
}

TEST(Optimizer, TheCapturedUpdateEqualsTheEagerOne) {
  ExpectTheCapturedUpdateIsTheEagerOne(torch::kCPU, /*capture=*/true, 5, /*max_norm=*/1.0);
  ExpectTheCapturedUpdateIsTheEagerOne(torch::kCPU, /*capture=*/true, 3, /*max_norm=*/0.0);  // measured, not clipped
}

TEST(Optimizer, TheCapturedUpdateReplaysTheEagerOneOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  ExpectTheCapturedUpdateIsTheEagerOne(torch::Device(torch::kCUDA, 0), /*capture=*/true, 6, /*max_norm=*/1.0);
}

}  // namespace
}  // namespace docmatch::train
