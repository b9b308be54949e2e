// The captured SMITH step (train/captured_step.h). On CPU, at 1, 2 and 3
// ranks: its static inputs, scales and sums read back give the plain
// objective's values, gradients and parameters, over batches that take two
// buckets, each bucket reused by another batch. On CUDA at one rank (skipped
// without a GPU): the replayed graphs give the eager steps' losses, gradients
// and parameters, and dropout draws anew at each replay. The captured
// contrastive fine-tuning step likewise, against the plain objective
// (ChunkedPairObjective over Contrastive) at one rank: on CPU in float64, on
// CUDA replayed.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../data/test_corpus.h"
#include "tiny_smith.h"
#include "data/batches/blocks.h"
#include "data/batches/step_buckets.h"
#include "dist/gradient_synchronizer.h"
#include "dist/process_group.h"
#include "model/document_model.h"
#include "train/captured_step.h"
#include "train/finetune_batches.h"
#include "train/grad_cache.h"
#include "train/objectives.h"
#include "train/optimizer.h"

namespace docmatch {
namespace {

model::SmithConfig Tiny(double dropout) { return testing::TinySmith(dropout); }

model::SmithPretraining Seeded(const model::SmithConfig& c) {
  torch::manual_seed(0);
  return model::SmithPretraining(model::SmithEncoder(c), c);
}

const data::BlockOptions kBlocks{8, 12};
const data::StepBuckets kBuckets{/*granularity=*/8, /*ratio=*/1.5};

struct Batch {
  data::BlockBatch batch;
  data::StepCounts counts;
  data::StepShape shape;
};

// This rank's batches (3 documents each, other documents per rank), in an
// order that uses two buckets, each with two different batches: A1 B1 A2 B2
// A1 B2. Each rank has its own buckets (the ranks gather uneven pools).
std::vector<Batch> Steps(int rank) {
  static std::vector<data::Document> documents = [] {
    std::vector<data::Document> d;
    for (int i = 0; i < 400; ++i) d.push_back(data::testing::SyntheticDocument(i, 11));
    return d;
  }();
  data::MaskOptions masks;
  masks.vocab_size = 1005;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<Batch>> by_shape;  // (R, N, M) -> batches
  for (int64_t start = rank * 100; start + 3 <= rank * 100 + 100; ++start) {
    std::vector<const data::Document*> docs;
    for (int64_t i = start; i < start + 3; ++i) docs.push_back(&documents[i]);
    Batch b;
    b.batch = data::BuildBlockBatch(docs, kBlocks, &masks, /*epoch=*/start);
    b.counts = data::CountStep(b.batch);
    b.shape = data::BucketFor(b.counts, b.batch.B, b.batch.K, kBlocks, kBuckets);
    std::vector<Batch>& same = by_shape[{b.shape.R, b.shape.N, b.shape.M}];
    if (same.size() < 2) same.push_back(std::move(b));
  }
  std::vector<std::vector<Batch>*> two;
  for (auto& [shape, batches] : by_shape)
    if (batches.size() == 2 && two.size() < 2) two.push_back(&batches);
  EXPECT_EQ(two.size(), 2u) << "rank " << rank << ": fewer than two buckets with two batches each";
  if (two.size() < 2) return {};
  std::vector<Batch>& a = *two[0];
  std::vector<Batch>& b = *two[1];
  return {a[0], b[0], a[1], b[1], a[0], b[1]};
}

// The largest difference between two modules' gradients, and whether the
// same parameters have one.
double GradientGap(torch::nn::Module& x, torch::nn::Module& y) {
  const auto px = x.named_parameters(), py = y.named_parameters();
  double gap = 0;
  for (size_t i = 0; i < px.size(); ++i) {
    const torch::Tensor& gx = px[i].value().grad();
    const torch::Tensor& gy = py[i].value().grad();
    EXPECT_EQ(gx.defined(), gy.defined()) << px[i].key();
    if (gx.defined() && gy.defined()) gap = std::max(gap, (gx - gy).abs().max().item<double>());
  }
  return gap;
}

double ParameterGap(torch::nn::Module& x, torch::nn::Module& y) {
  const auto px = x.named_parameters(), py = y.named_parameters();
  double gap = 0;
  for (size_t i = 0; i < px.size(); ++i)
    gap = std::max(gap, (px[i].value() - py[i].value()).abs().max().item<double>());
  return gap;
}

TEST(CapturedSmithSteps, StaticInputsGiveThePlainObjectiveAcrossBuckets) {
  dist::ProcessGroup world;
  const std::vector<Batch> steps = Steps(world.rank());
  // Every rank leaves together, before any collective, if one has no steps.
  if (world.control().Any(steps.empty())) FAIL() << "a rank found no two buckets with two batches each";
  for (const bool sentence_blocks : {true, false}) {
    const std::string name = sentence_blocks ? "wp+sp" : "wp";
    model::SmithPretraining plain = Seeded(Tiny(0.0)), staged = Seeded(Tiny(0.0));
    plain->to(torch::kFloat64);
    staged->to(torch::kFloat64);
    dist::GradientSynchronizer sync_plain(plain->parameters(), world), sync_staged(staged->parameters(), world);
    torch::optim::Adam adam_plain(plain->parameters(), torch::optim::AdamOptions(1e-2));
    torch::optim::Adam adam_staged(staged->parameters(), torch::optim::AdamOptions(1e-2));
    train::CapturedSmithSteps captured(staged, world, {sentence_blocks, false, /*capture=*/true});
    EXPECT_FALSE(captured.captures()) << "a CPU run captures nothing";
    for (size_t s = 0; s < steps.size(); ++s) {
      const Batch& b = steps[s];
      adam_plain.zero_grad();
      adam_staged.zero_grad(/*set_to_none=*/false);  // as the loop does for a stage that keeps its gradients
      const train::Objective p = train::SmithPretraining(plain, model::ToTensors(b.batch, torch::kCPU), sentence_blocks,
                                                         world);
      const train::Objective c = captured.Step(b.batch, b.counts, b.shape, 0.5);
      ASSERT_TRUE(c.loss.defined());
      train::Backward(p, 0.5, [&](bool last) { sync_plain.Prepare(last); });
      train::Backward(c, 0.5, [&](bool last) { sync_staged.Prepare(last); });
      sync_plain.Finalize();
      sync_staged.Finalize();
      EXPECT_NEAR(c.value, p.value, 1e-12 * std::abs(p.value)) << name << " step " << s;
      ASSERT_EQ(c.parts.size(), p.parts.size()) << name;
      for (const auto& [part, value] : p.parts) EXPECT_NEAR(c.parts.at(part), value, 1e-12) << name << " " << part;
      if (sentence_blocks) {
        const auto dc = c.diagnostics(), dp = p.diagnostics();
        EXPECT_NEAR(dc.at("block_rank"), dp.at("block_rank"), 1e-9) << name << " step " << s;
        EXPECT_NEAR(dc.at("block_cosine"), dp.at("block_cosine"), 1e-12) << name << " step " << s;
      }
      EXPECT_LT(GradientGap(*plain, *staged), 1e-11) << name << " step " << s;
      adam_plain.step();
      adam_staged.step();
    }
    EXPECT_EQ(captured.buckets(), 2) << name << ": one set of static inputs a bucket";
    EXPECT_EQ(captured.graphs(), 0);
    EXPECT_LT(ParameterGap(*plain, *staged), 1e-9) << name;
  }
}

// TF32 off while alive (a test's comparisons in fp32); the rest of the
// process keeps its setting.
struct Tf32Off {
  bool cublas = at::globalContext().allowTF32CuBLAS(), cudnn = at::globalContext().allowTF32CuDNN();
  Tf32Off() {
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
  }
  ~Tf32Off() {
    at::globalContext().setAllowTF32CuBLAS(cublas);
    at::globalContext().setAllowTF32CuDNN(cudnn);
  }
};

// Contrastive fine-tuning's captured step (CapturedContrastiveSteps) against
// the plain objective on `group`'s device in `dtype`, a learned temperature
// each, four micro-steps of pairs A, B, A, C back-propagated at `scale`, SGD
// after each: B holds A's documents in other roles (the same bucket, its
// static inputs rewritten), C one hard negative fewer (a key of its own).
// Values and parts to `tolerance` (relative), gradients of the module and the
// log-scale, and the parameters after. Returns the captured side's steps.
void ExpectTheCapturedContrastiveStep(dist::ProcessGroup& group, torch::ScalarType dtype, double scale,
                                      double tolerance) {
  model::ModelConfig config;
  config.kind = "smith";
  config.smith = Tiny(0.0);
  const torch::Device device = group.device();
  std::vector<std::unique_ptr<model::DocumentModel>> models;
  std::vector<torch::Tensor> log_scales;
  for (int side = 0; side < 2; ++side) {
    torch::manual_seed(11);
    models.push_back(model::DocumentModel::Create(config));
    models.back()->module().to(device, dtype);
    log_scales.push_back(torch::full({}, std::log(20.0), torch::TensorOptions(dtype).device(device)).requires_grad_());
  }
  model::DocumentModel& plain = *models[0];
  model::DocumentModel& graphed = *models[1];
  const model::Temperature plain_t = model::Temperature::Learned(log_scales[0]);
  train::CapturedContrastiveSteps steps(graphed, model::Temperature::Learned(log_scales[1]), device);
  EXPECT_EQ(steps.captures(), device.is_cuda());
  static std::vector<data::Document> documents = [] {
    std::vector<data::Document> d;
    for (int i = 0; i < 8; ++i) d.push_back(data::testing::SyntheticDocument(i, 3 + i % 4));
    return d;
  }();
  const auto chunk = [&](train::PairDocuments pairs) {
    std::vector<const data::Document*> docs;
    for (int64_t i : pairs.All()) docs.push_back(&documents[i]);
    return train::PreparedChunk{pairs, plain.Batch(docs), 0};
  };
  const train::PreparedChunk a = chunk({{0, 1, 2}, {3, 4, 5}, {6, 7}}), b = chunk({{3, 4, 5}, {0, 1, 2}, {7, 6}}),
                             c = chunk({{0, 1, 2}, {3, 4, 5}, {6}});
  const std::vector<const train::PreparedChunk*> order = {&a, &b, &a, &c};
  const auto gap = [](const std::vector<torch::Tensor>& x, const std::vector<torch::Tensor>& y, bool grads) {
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const torch::Tensor u = grads ? x[i].grad() : x[i], v = grads ? y[i].grad() : y[i];
      EXPECT_EQ(u.defined(), v.defined()) << i;
      if (u.defined() && v.defined()) worst = std::max(worst, (u - v).abs().max().item<double>());
    }
    return worst;
  };
  const auto trained = [&](model::DocumentModel& m, int side) {
    std::vector<torch::Tensor> p = m.module().parameters();
    p.push_back(log_scales[side]);
    return p;
  };
  for (size_t s = 0; s < order.size(); ++s) {
    const train::PreparedChunk& pass = *order[s];
    const train::Objective p = train::ChunkedPairObjective(
        1, [&](int64_t) { return train::EmbedPairs(plain, pass, device); }, plain_t,
        [&](const train::ContrastivePairs& pairs, const model::Temperature& t) {
          return train::Contrastive(pairs, t, group);
        },
        device);
    const train::Objective g = steps.Step(pass, scale);
    train::Backward(p, scale, [](bool) {});
    train::Backward(g, scale, [](bool) {});
    EXPECT_NEAR(g.value, p.value, tolerance * std::abs(p.value)) << "step " << s;
    ASSERT_EQ(g.parts.size(), p.parts.size());
    for (const auto& [part, value] : p.parts) EXPECT_NEAR(g.parts.at(part), value, tolerance) << part << " step " << s;
    EXPECT_LT(gap(trained(plain, 0), trained(graphed, 1), /*grads=*/true), 10 * tolerance) << "step " << s;
    torch::NoGradGuard no_grad;
    for (int side = 0; side < 2; ++side) {
      for (torch::Tensor& t : trained(*models[side], side)) {
        if (!t.grad().defined()) continue;
        t.sub_(0.1 * t.grad());
        t.mutable_grad().zero_();  // in place, as a stage that captures its steps keeps them
      }
    }
  }
  EXPECT_EQ(steps.inputs(), 2) << "A and B share a bucket, C has a key of its own";
  EXPECT_LT(gap(trained(plain, 0), trained(graphed, 1), /*grads=*/false), 100 * tolerance);
}

TEST(CapturedContrastiveSteps, StaticInputsGiveThePlainObjective) {
  dist::ProcessGroup self(MPI_COMM_SELF, torch::kCPU);
  ExpectTheCapturedContrastiveStep(self, torch::kFloat64, 0.5, 1e-12);
}

#ifdef DOCMATCH_HAS_CUDA
TEST(CapturedContrastiveSteps, ReplaysGiveTheEagerStepsOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  const Tf32Off tf32_off;
  dist::ProcessGroup gpu(MPI_COMM_SELF, torch::Device(torch::kCUDA, 0));
  ExpectTheCapturedContrastiveStep(gpu, torch::kFloat32, 0.5, 1e-5);  // the scale folded into the graph's loss
}

// One rank on the GPU: the graphed micro-steps (forward and backward
// replayed, the optimizer eager) against the same steps run eagerly, fp32
// with TF32 off and dropout off, two micro-steps accumulated at scale 1/2
// before each update (the scale folded into the graph's loss); then with
// dropout, a replay of one batch twice draws two masks.
TEST(CapturedSmithSteps, ReplaysGiveTheEagerStepsOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  dist::ProcessGroup world;
  if (world.size() > 1) GTEST_SKIP() << "graphs run at one rank";
  const Tf32Off tf32_off;
  dist::ProcessGroup gpu(MPI_COMM_SELF, torch::Device(torch::kCUDA, 0));
  const std::vector<Batch> steps = Steps(0);
  ASSERT_FALSE(steps.empty());
  model::SmithPretraining eager = Seeded(Tiny(0.0)), graphed = Seeded(Tiny(0.0));
  eager->to(gpu.device());
  graphed->to(gpu.device());
  train::OptimizerOptions o;
  o.warmup_steps = 2;
  o.total_steps = 100;
  auto adam_eager = train::MakeAdamW(*eager, o), adam_graphed = train::MakeAdamW(*graphed, o);
  train::CapturedSmithSteps captured(graphed, gpu, {/*sentence_blocks=*/true, false, /*capture=*/true});
  ASSERT_TRUE(captured.captures());
  for (size_t s = 0; s < steps.size(); ++s) {
    const Batch& b = steps[s];
    const train::Objective e = train::SmithPretraining(eager, model::ToTensors(b.batch, gpu.device()), true, gpu);
    const train::Objective g = captured.Step(b.batch, b.counts, b.shape, 0.5);
    EXPECT_FALSE(g.loss.defined()) << "a captured step's backward has run";
    train::Backward(e, 0.5, [](bool) {});
    int prepared = 0;
    train::Backward(g, 0.5, [&](bool last) { prepared += last; });
    EXPECT_EQ(prepared, 1);
    EXPECT_NEAR(g.value, e.value, 1e-5 * std::abs(e.value)) << "step " << s;
    for (const auto& [part, value] : e.parts) EXPECT_NEAR(g.parts.at(part), value, 1e-5) << part << " step " << s;
    EXPECT_LT(GradientGap(*eager, *graphed), 1e-5) << "step " << s;
    if (s % 2 == 0) continue;  // the second micro-step of each update
    for (auto* adam : {adam_eager.get(), adam_graphed.get()}) train::SetLearningRate(*adam, 1e-3);
    adam_eager->step();
    adam_graphed->step();
    adam_eager->zero_grad();
    adam_graphed->zero_grad(/*set_to_none=*/false);
  }
  EXPECT_EQ(captured.graphs(), 2) << "one graph a bucket, captured at its second use";
  EXPECT_EQ(captured.replays(), 4);
  EXPECT_LT(ParameterGap(*eager, *graphed), 1e-4);

  // Dropout under replay: the same batch twice, two draws.
  model::SmithPretraining noisy = Seeded(Tiny(0.1));
  noisy->to(gpu.device());
  train::CapturedSmithSteps noisy_steps(noisy, gpu, {true, false, true});
  std::vector<double> values;
  for (int i = 0; i < 4; ++i) {  // warm-up, capture + replay, replay, replay; gradients zeroed between
    values.push_back(noisy_steps.Step(steps[0].batch, steps[0].counts, steps[0].shape, 1.0).value);
    for (auto& p : noisy->parameters())
      if (p.grad().defined()) p.mutable_grad().zero_();
  }
  EXPECT_EQ(noisy_steps.replays(), 3);
  for (double v : values) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NE(values[2], values[3]) << "two replays of one batch drew the same dropout";
}
#endif

}  // namespace
}  // namespace docmatch
