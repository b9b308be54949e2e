// Every model on CUDA gives what it gives on CPU (TF32 off), a bf16
// autocast step runs, and SMITH's step makes no host sync. Skipped cleanly
// on machines without a GPU.
#include <ATen/autocast_mode.h>
#ifdef DOCMATCH_HAS_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "../data/test_corpus.h"
#include "model/document_model.h"
#include "model/match_bert.h"
#include "model/sdr.h"
#include "model/smash.h"
#include "model/smith.h"
#include "model/transformer.h"

namespace docmatch::model {
namespace {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
    for (int i = 0; i < 4; ++i) docs_.push_back(data::testing::SyntheticDocument(i, 12));
    for (const auto& d : docs_) pointers_.push_back(&d);
  }
  static SmithConfig SmallSmith() {
    SmithConfig c;
    c.vocab_size = 1005;
    c.hidden = 64;
    c.heads = 4;
    c.intermediate = 128;
    c.block_length = 16;
    c.max_blocks = 8;
    return c;
  }
  // The documents as a WP+SP batch: word masks and masked blocks drawn.
  data::BlockBatch MaskedBlocks(const SmithConfig& c) const {
    data::MaskOptions masks;
    masks.vocab_size = c.vocab_size;
    return data::BuildBlockBatch(pointers_, c.Blocks(), &masks, 0);
  }
  std::vector<data::Document> docs_;
  std::vector<const data::Document*> pointers_;
  const torch::Device cuda_{torch::kCUDA};
};

TEST_F(CudaTest, SmithPretrainingLossAndVectorsMatchCpu) {
  SmithConfig c = SmallSmith();
  c.dropout = 0.0;
  torch::manual_seed(0);
  SmithPretraining model(SmithEncoder(c), c);
  const data::BlockBatch batch = MaskedBlocks(c);
  const auto [cpu_loss, cpu_lm, cpu_block] = model->Loss(ToTensors(batch, torch::kCPU), true);
  const torch::Tensor cpu_vectors = model->encoder(ToTensors(batch, torch::kCPU));
  model->to(cuda_);
  const BlockTensors t = ToTensors(batch, cuda_);
  const auto [gpu_loss, gpu_lm, gpu_block] = model->Loss(t, true);
  EXPECT_NEAR(gpu_loss.item<double>(), cpu_loss.item<double>(), 1e-4);
  EXPECT_TRUE(torch::allclose(model->encoder(t).cpu(), cpu_vectors, 1e-4, 1e-5));
  {
    // bf16 autocast with fp32 master weights: the step runs and stays finite.
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    const auto [loss, lm, block] = model->Loss(t, true);
    loss.backward();
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::clear_cache();
    EXPECT_TRUE(std::isfinite(loss.item<double>()));
    EXPECT_NEAR(loss.item<double>(), cpu_loss.item<double>(), 0.1 * std::abs(cpu_loss.item<double>()));
  }
}

// Attention without padding on CUDA (the variable-length kernels: the
// memory-efficient one in fp32, flash attention in bf16) against the padded
// grid on the same device: the packed outputs at real tokens and, in fp32,
// every parameter's gradient. Rows of one length, a row with holes and a
// single-token row, as the CPU test in smith_test.cpp has them.
TEST_F(CudaTest, UnpaddedAttentionEqualsThePaddedGrid) {
  torch::manual_seed(3);
  TransformerConfig config{/*hidden=*/64, /*heads=*/4, /*intermediate=*/128, /*layers=*/2, /*dropout=*/0.0};
  TransformerEncoder encoder(config);
  InitializeBertStyle(*encoder);
  encoder->to(cuda_);
  torch::Tensor mask = torch::rand({24, 32}).lt(0.7);
  mask.index_put_({torch::indexing::Slice(), 0}, true);     // every row has a real token
  mask.index_put_({2, torch::indexing::Slice(1)}, false);  // one real token
  mask.index_put_({3}, mask[4]);                            // rows 3 and 4 of one length
  const PackedLayout layout = PackedLayout::FromIndex(mask.reshape({-1}).nonzero().squeeze(1).to(cuda_), 24, 32);
  const int64_t N = layout.index.size(0);
  const torch::Tensor x = torch::randn({N, 64}, torch::TensorOptions().device(cuda_));
  const torch::Tensor weights = torch::randn({N, 64}, torch::TensorOptions().device(cuda_));
  const auto run = [&](bool grid) {
    UsePackedAttention(*encoder, grid ? PackedAttention::kPadded : PackedAttention::kUnpadded);
    const torch::Tensor out = encoder->ForwardPacked(x, layout);
    (out * weights).sum().backward();
    std::vector<torch::Tensor> result = {out.detach()};
    for (auto& p : encoder->parameters()) {
      result.push_back(p.grad().clone());
      p.mutable_grad().zero_();
    }
    return result;
  };
  const std::vector<torch::Tensor> unpadded = run(false), grid = run(true);
  EXPECT_TRUE(torch::allclose(unpadded[0], grid[0], 1e-4, 1e-5)) << (unpadded[0] - grid[0]).abs().max();
  for (size_t i = 1; i < grid.size(); ++i) {
    EXPECT_TRUE(torch::allclose(unpadded[i], grid[i], 1e-3, 1e-5)) << "parameter " << i;
  }
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  torch::Tensor bf16[2];
  for (const bool padded : {false, true}) {
    UsePackedAttention(*encoder, padded ? PackedAttention::kPadded : PackedAttention::kUnpadded);
    torch::NoGradGuard no_grad;
    bf16[padded] = encoder->ForwardPacked(x, layout).to(torch::kFloat32);
  }
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  at::autocast::clear_cache();
  EXPECT_LT((bf16[0] - bf16[1]).abs().max().item<double>(), 0.1);
  EXPECT_LT((bf16[0] - grid[0]).abs().max().item<double>(), 0.1);

  // Fewer real tokens in the batch than the block length (N = 5 < T = 32):
  // fp32 forward and backward still equal the grid's.
  const PackedLayout one =
      PackedLayout::FromIndex(torch::arange(5, torch::TensorOptions(torch::kLong).device(cuda_)), 1, 32);
  const torch::Tensor short_x = torch::randn({5, 64}, torch::TensorOptions().device(cuda_)).requires_grad_();
  torch::Tensor short_out[2], short_grad[2];
  for (const bool padded : {false, true}) {
    UsePackedAttention(*encoder, padded ? PackedAttention::kPadded : PackedAttention::kUnpadded);
    short_out[padded] = encoder->ForwardPacked(short_x, one);
    short_out[padded].sum().backward();
    short_grad[padded] = short_x.grad().clone();
    short_x.mutable_grad().zero_();
  }
  EXPECT_TRUE(torch::allclose(short_out[0], short_out[1], 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(short_grad[0], short_grad[1], 1e-3, 1e-5));
}

#ifdef DOCMATCH_HAS_CUDA
// The GPU side of host_reads.h's CPU tests: with PyTorch's sync debugging
// set to error, a bf16 WP+SP step (its tensors and layout made, forward,
// backward) and the SMITH document vectors synchronise with the host nowhere.
// PyTorch's sync debugging set to error, and bf16 autocast on, for a scope;
// both restored however the scope ends, so a failure here cannot leave the
// later tests under them.
class NoSyncBf16 {
 public:
  explicit NoSyncBf16(bool refuse_syncs) {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    if (refuse_syncs) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  }
  ~NoSyncBf16() {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::clear_cache();
  }
};

TEST_F(CudaTest, SmithStepSynchronisesWithTheHostNowhere) {
  const SmithConfig c = SmallSmith();
  torch::manual_seed(0);
  SmithPretraining model(SmithEncoder(c), c);
  model->to(cuda_);
  const data::BlockBatch batch = MaskedBlocks(c);
  const auto step = [&](bool refuse_syncs) {
    const NoSyncBf16 scope(refuse_syncs);
    const BlockTensors t = ToTensors(batch, cuda_);
    const auto [loss, lm, block] = model->Loss(t, true);
    loss.backward();
    const torch::Tensor vectors = model->encoder(t);
    return loss.detach();
  };
  step(/*refuse_syncs=*/false);  // allocations, handles and kernels chosen once
  torch::Tensor loss;
  try {
    loss = step(/*refuse_syncs=*/true);
  } catch (const c10::Error& e) {
    FAIL() << "the step synchronised with the host: " << e.what_without_backtrace() << "\n" << e.what();
  }
  ASSERT_TRUE(loss.defined());
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  // The check bites: a nonzero() of a device mask is refused under it.
  const torch::Tensor mask = torch::ones({4}, torch::TensorOptions(torch::kBool).device(cuda_));
  const NoSyncBf16 scope(/*refuse_syncs=*/true);
  EXPECT_ANY_THROW(mask.nonzero());
}

// SMASH under bf16 autocast on the GPU: the attention GRU and its pooling
// run in float32 (PyTorch's autocast wrapper of cuDNN's RNNs would run the GRU
// in fp16, with no loss scaling), so they equal the CPU's fp32 forward. And
// the pair head on the GPU scores host vectors, as search gives it a file's
// rows while the model stays on the GPU for text queries: host logits equal
// to the CPU model's.
TEST_F(CudaTest, SmashKeepsItsGruInFloat32UnderBf16AndItsHeadScoresHostVectors) {
  torch::manual_seed(0);
  GruAttention gru(16, 8);
  const torch::Tensor x = torch::randn({4, 6, 16});
  const torch::Tensor lengths = torch::tensor({6, 3, 5, 1}, torch::kLong);
  const torch::Tensor fp32 = gru(x, lengths);
  gru->to(cuda_);
  torch::Tensor under_bf16;
  {
    NoSyncBf16 bf16(/*refuse_syncs=*/false);
    under_bf16 = gru(x.to(cuda_), lengths);
  }
  EXPECT_EQ(under_bf16.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::allclose(under_bf16.cpu(), fp32, 1e-4, 1e-5))
      << (under_bf16.cpu() - fp32).abs().max().item<double>();

  ModelConfig config;
  config.kind = "smash";
  config.smash.vocab_size = 1005;
  config.smash.embedding = 16;
  config.smash.gru_units = 8;
  config.smash.pair_hidden = 16;
  config.smash.dropout = 0.0;
  const std::unique_ptr<DocumentModel> model = DocumentModel::Create(config);
  model->module().eval();
  const torch::Tensor queries = torch::randn({3, model->dimension()});
  const torch::Tensor candidates = torch::randn({5, model->dimension()});
  const torch::NoGradGuard no_grad;
  const torch::Tensor matrix_cpu = model->ScoreMatrix(queries, candidates);
  const torch::Tensor pairs_cpu = model->PairLogits(queries, candidates.slice(0, 0, 3));
  model->module().to(cuda_);
  const torch::Tensor matrix = model->ScoreMatrix(queries, candidates);
  const torch::Tensor pairs = model->PairLogits(queries, candidates.slice(0, 0, 3));
  EXPECT_TRUE(matrix.is_cpu());
  EXPECT_TRUE(pairs.is_cpu());
  EXPECT_TRUE(torch::allclose(matrix, matrix_cpu, 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(pairs, pairs_cpu, 1e-4, 1e-5));
}
#endif

TEST_F(CudaTest, FlatSentenceAndHierarchicalEncodersMatchCpu) {
  torch::manual_seed(0);
  MatchBertConfig mb;
  mb.vocab_size = 1005;
  mb.hidden = 32;
  mb.heads = 2;
  mb.intermediate = 64;
  mb.layers = 2;
  mb.max_tokens = 32;
  mb.dropout = 0.0;
  FlatEncoder flat(mb);
  const torch::Tensor tokens = ToTensor(data::BuildFlatBatch(pointers_, mb.max_tokens), torch::kCPU);
  const torch::Tensor flat_cpu = flat(tokens);
  flat->to(cuda_);
  EXPECT_TRUE(torch::allclose(flat(tokens.to(cuda_)).cpu(), flat_cpu, 1e-4, 1e-5));

  SdrConfig sc;
  sc.vocab_size = 1005;
  sc.hidden = 32;
  sc.heads = 2;
  sc.intermediate = 64;
  sc.layers = 2;
  sc.dropout = 0.0;
  SentenceEncoder sdr(sc);
  data::MaskOptions masks;
  masks.vocab_size = 1005;
  const data::SdrBatch sdr_batch = data::BuildSdrBatch(pointers_, {sc.max_tokens}, &masks, 0);
  const auto cpu_sdr = std::get<0>(sdr->Loss(ToTensors(sdr_batch, torch::kCPU))).item<double>();
  sdr->to(cuda_);
  EXPECT_NEAR(std::get<0>(sdr->Loss(ToTensors(sdr_batch, cuda_))).item<double>(), cpu_sdr, 1e-4);

  SmashConfig mc;
  mc.vocab_size = 1005;
  mc.embedding = 16;
  mc.gru_units = 8;
  mc.dropout = 0.0;
  SmashEncoder smash(mc);
  const data::HierarchyBatch hierarchy = data::BuildHierarchyBatch(pointers_, {});
  const torch::Tensor smash_cpu = smash(ToTensors(hierarchy, torch::kCPU));
  smash->to(cuda_);
  EXPECT_TRUE(torch::allclose(smash(ToTensors(hierarchy, cuda_)).cpu(), smash_cpu, 1e-4, 1e-5));
}

}  // namespace
}  // namespace docmatch::model
