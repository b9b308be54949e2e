// World-size invariance (DESIGN.md): with dropout off, N ranks x batch b give
// the same loss and gradients as 1 rank x batch N*b over the same documents,
// for SMITH pre-training (word LM + masked sentence blocks), DocSplit, SDR,
// Siamese and contrastive fine-tuning; after optimizer steps the parameters
// still agree and are identical on every rank. Models run in float64 so the
// tolerance can be tight. The one-rank reference runs inside every rank on MPI_COMM_SELF.
// Gradient caching (train/grad_cache.h) is held to the same standard: each
// rank's batch in chunks, against the plain objective over the global batch.
#include <gtest/gtest.h>

#include <map>

#include "../data/test_corpus.h"
#include "../model/host_reads.h"
#include "tiny_smith.h"
#include "data/batches/docsplit.h"
#include "dist/gradient_synchronizer.h"
#include "dist/process_group.h"
#include "model/losses.h"
#include "train/grad_cache.h"
#include "train/objectives.h"

namespace docmatch {
namespace {

constexpr int64_t kPerRank = 3;  // b

using Make = std::function<std::shared_ptr<torch::nn::Module>()>;
using Loss = std::function<train::Objective(torch::nn::Module&, int64_t begin, int64_t end, dist::ProcessGroup&)>;

const std::vector<data::Document>& Documents() {
  static const std::vector<data::Document> docs = [] {
    std::vector<data::Document> d;
    for (int i = 0; i < 64; ++i) d.push_back(data::testing::SyntheticDocument(i, 21));
    return d;
  }();
  return docs;
}

std::vector<const data::Document*> Range(int64_t begin, int64_t end, int64_t shift = 0) {
  std::vector<const data::Document*> out;
  for (int64_t i = begin; i < end; ++i) out.push_back(&Documents()[i + shift]);
  return out;
}

model::SmithConfig SmithTiny() { return testing::TinySmith(); }

// Mean pooling over up to two windows of 12 tokens per document.
model::MatchBertConfig MatchBertTiny() {
  model::MatchBertConfig c;
  c.vocab_size = 1005;
  c.hidden = 16;
  c.heads = 2;
  c.intermediate = 32;
  c.layers = 1;
  c.max_tokens = 12;
  c.dropout = 0.0;
  c.pooling = "mean";
  c.chunks = 2;
  return c;
}

// A holder that shares `m` without owning it, for the objectives, which
// take module holders; `m` is the Make's module, alive for the whole test.
template <typename ModuleHolder>
ModuleHolder Borrow(torch::nn::Module& m) {
  using Impl = typename ModuleHolder::ContainedType;
  return ModuleHolder(std::shared_ptr<Impl>(&dynamic_cast<Impl&>(m), [](Impl*) {}));
}

// Tiny models from seed 0: SMITH's encoder, the encoder with its
// pre-training heads, and the flat encoder with its word-LM head.
std::shared_ptr<torch::nn::Module> SeededSmithEncoder() {
  torch::manual_seed(0);
  return model::SmithEncoder(SmithTiny()).ptr();
}
std::shared_ptr<torch::nn::Module> SeededSmithPretraining() {
  torch::manual_seed(0);
  return model::SmithPretraining(model::SmithEncoder(SmithTiny()), SmithTiny()).ptr();
}
// The flat encoder of `c` with its word-LM head, from seed 0.
Make SeededFlatPretraining(const model::MatchBertConfig& c) {
  return [c] {
    torch::manual_seed(0);
    return model::FlatPretraining(model::FlatEncoder(c), c).ptr();
  };
}

data::MaskOptions Masks() {
  data::MaskOptions m;
  m.vocab_size = 1005;
  return m;
}

// `parameter_atol`: Adam moves a parameter whose gradient is far below its
// eps (1e-8) by lr * g / eps, so there float64 summation noise in the
// gradients (1e-17 to 1e-13, well inside the gradient check) grows by
// lr / eps = 1e6 in the parameters.
// `reference` (default: `loss`) computes the one-rank objective over the
// global batch, when the distributed side computes it another way.
void ExpectInvariant(const std::string& name, const Make& make, const Loss& loss, int steps = 4,
                     // Measured: 4e-10 on the GPU machine's CPU (another BLAS kernel), 1e-10 here.
                     double parameter_atol = 1e-9, const Loss& reference_loss = nullptr,
                     double gradient_atol = 1e-11) {
  dist::ProcessGroup world, self(MPI_COMM_SELF);
  const int64_t begin = world.rank() * kPerRank, end = begin + kPerRank, global = world.size() * kPerRank;
  auto distributed = make(), reference = make();
  distributed->to(torch::kFloat64);
  reference->to(torch::kFloat64);
  dist::SynchronizerOptions options;
  options.bucket_bytes = 16 << 10;  // several buckets, so some start during backward
  dist::GradientSynchronizer synchronizer(distributed->parameters(), world, options);
  synchronizer.BroadcastParameters();
  torch::optim::Adam optimizer_d(distributed->parameters(), torch::optim::AdamOptions(1e-2));
  torch::optim::Adam optimizer_r(reference->parameters(), torch::optim::AdamOptions(1e-2));

  for (int step = 0; step < steps; ++step) {
    optimizer_d.zero_grad();
    const train::Objective d = loss(*distributed, begin, end, world);
    int passes = 0;
    train::Backward(d, 1.0, [&](bool last) {
      ++passes;
      synchronizer.Prepare(/*sync=*/last);
    });
    synchronizer.Finalize();
    if (d.backward) {
      EXPECT_GT(passes, 1) << name << ": a cached objective re-runs every chunk";
    }
    optimizer_r.zero_grad();
    const train::Objective r = (reference_loss ? reference_loss : loss)(*reference, 0, global, self);
    ASSERT_FALSE(r.backward) << name << ": the reference is the plain objective";
    r.loss.backward();

    EXPECT_NEAR(d.value, r.value, 1e-10 * std::max(1.0, std::abs(r.value))) << name << " step " << step;
    const auto pd = distributed->named_parameters(), pr = reference->named_parameters();
    for (size_t i = 0; i < pd.size(); ++i) {
      const torch::Tensor& gd = pd[i].value().grad();
      const torch::Tensor& gr = pr[i].value().grad();
      // A parameter no loss reached has no gradient at any world size (not a
      // zero one, which AdamW's decay would still move).
      ASSERT_EQ(gd.defined(), gr.defined()) << name << ": " << pd[i].key();
      if (!gr.defined()) continue;
      EXPECT_TRUE(torch::allclose(gd, gr, 1e-8, gradient_atol))
          << name << " step " << step << ": " << pd[i].key() << " max diff " << (gd - gr).abs().max().item<double>()
          << " of gradients up to " << gr.abs().max().item<double>() << "; parameters differ by up to "
          << (pd[i].value() - pr[i].value()).abs().max().item<double>();
    }
    // After the first step's rebuild, buckets start during backward; one rank has none.
    if (world.size() == 1) {
      EXPECT_EQ(synchronizer.num_buckets(), 0) << name;
    } else if (step > 0) {
      EXPECT_GT(synchronizer.buckets_launched_during_backward(), 0) << name;
    }
    optimizer_d.step();
    optimizer_r.step();
  }
  // Parameters: equal to the reference, and bit-identical on every rank.
  const auto pd = distributed->named_parameters(), pr = reference->named_parameters();
  for (size_t i = 0; i < pd.size(); ++i) {
    EXPECT_TRUE(torch::allclose(pd[i].value(), pr[i].value(), 1e-8, parameter_atol))
        << name << ": " << pd[i].key() << " max diff " << (pd[i].value() - pr[i].value()).abs().max().item<double>();
    torch::Tensor root = pd[i].value().detach().clone();
    world.data().Broadcast(root, 0);
    EXPECT_TRUE(torch::equal(root, pd[i].value().detach())) << name << ": rank " << world.rank() << " " << pd[i].key();
  }
}

TEST(WorldSizeInvariance, SmithMaskedWordsAndSentenceBlocks) {
  ExpectInvariant("smith-wp+sp", SeededSmithPretraining,
                  [](torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
                    const data::MaskOptions masks = Masks();
                    const auto batch = data::BuildBlockBatch(Range(begin, end), {8, 12}, &masks, /*epoch=*/0);
                    auto holder = Borrow<model::SmithPretraining>(m);
                    return train::SmithPretraining(holder, model::ToTensors(batch, torch::kCPU), true, comm);
                  });
}

// --detach-block-targets: N ranks against one rank running a second
// formulation, the model's own outputs with the originals detached by hand.
TEST(WorldSizeInvariance, SmithSentenceBlocksWithDetachedTargets) {
  const auto build = [](int64_t begin, int64_t end) {
    const data::MaskOptions masks = Masks();
    return model::ToTensors(data::BuildBlockBatch(Range(begin, end), {8, 12}, &masks, /*epoch=*/0), torch::kCPU);
  };
  ExpectInvariant(
      "smith-wp+sp-detached", SeededSmithPretraining,
      [build](torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
        auto holder = Borrow<model::SmithPretraining>(m);
        return train::SmithPretraining(holder, build(begin, end), true, comm, /*detach_block_targets=*/true);
      },
      4, 1e-10,
      [build](torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup&) {
        auto holder = Borrow<model::SmithPretraining>(m);
        const auto out = holder->forward(build(begin, end), true);
        const torch::Tensor lm = holder->LanguageModelLoss(out.lm_hidden, out.lm_labels);
        const torch::Tensor positive = torch::arange(out.block_predictions.size(0));
        const torch::Tensor block =
            model::SentenceBlockLoss(out.block_predictions, out.block_originals.detach(), positive);
        train::Objective o;
        o.loss = lm + block;
        o.value = lm.item<double>() + block.item<double>();
        return o;
      });
}

// Each rank's batch padded to its own step bucket (so the ranks gather
// uneven pools, fillers among them): the objective, its gradients and the
// parameters after four steps are one rank's over the unpadded global batch.
TEST(WorldSizeInvariance, SmithBatchesPaddedToTheirStepBuckets) {
  const data::BlockOptions blocks{8, 12};
  // Every other document masks one block fewer: filler masked blocks too.
  const auto batch_of = [blocks](int64_t begin, int64_t end) {
    const data::MaskOptions masks = Masks();
    data::BlockBatch batch = data::BuildBlockBatch(Range(begin, end), blocks, &masks, /*epoch=*/0);
    for (int64_t d = begin; d < end; ++d)
      if (d % 2 == 0) batch.masked_blocks[(d - begin) * batch.K + batch.K - 1] = -1;
    return batch;
  };
  ExpectInvariant(
      "smith-wp+sp-bucketed", SeededSmithPretraining,
      [&](torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
        const data::BlockBatch batch = batch_of(begin, end);
        const data::StepCounts counts = data::CountStep(batch);
        const data::StepShape shape =
            data::BucketFor(counts, batch.B, batch.K, blocks, data::StepBuckets{/*granularity=*/8, /*ratio=*/1.5});
        EXPECT_GT(shape.R, counts.R);
        EXPECT_GT(shape.P, counts.P);
        auto holder = Borrow<model::SmithPretraining>(m);
        return train::SmithPretraining(holder, model::ToTensors(batch, torch::kCPU, &shape), true, comm,
                                       /*detach_block_targets=*/false, &counts);
      },
      4, 1e-9,
      [&](torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
        auto holder = Borrow<model::SmithPretraining>(m);
        return train::SmithPretraining(holder, model::ToTensors(batch_of(begin, end), torch::kCPU), true, comm);
      });
}

// What the detach changes, at one rank: the block head's gradient not at all
// (the targets' values are the same), the sentence encoder's, which the
// targets come from, yes.
TEST(SentenceBlocks, DetachedTargetsChangeOnlyTheGradientThatReachesThem) {
  dist::ProcessGroup self(MPI_COMM_SELF);
  const data::MaskOptions masks = Masks();
  const auto batch = model::ToTensors(data::BuildBlockBatch(Range(0, 6), {8, 12}, &masks, 0), torch::kCPU);
  std::map<std::string, torch::Tensor> grads[2];
  for (int detach = 0; detach < 2; ++detach) {
    auto m = SeededSmithPretraining();
    m->to(torch::kFloat64);
    auto holder = Borrow<model::SmithPretraining>(*m);
    train::SmithPretraining(holder, batch, true, self, detach == 1).loss.backward();
    for (const auto& p : m->named_parameters())
      if (p.value().grad().defined()) grads[detach][p.key()] = p.value().grad().clone();
  }
  const auto diff = [&](const std::string& name) {
    EXPECT_TRUE(grads[0].count(name) && grads[1].count(name)) << name;
    return (grads[0].at(name) - grads[1].at(name)).abs().max().item<double>();
  };
  EXPECT_EQ(diff("block_dense.weight"), 0.0);
  EXPECT_EQ(diff("block_norm.weight"), 0.0);
  EXPECT_GT(diff("encoder.block_dense.weight"), 1e-6);
  EXPECT_GT(diff("encoder.embeddings.tokens.weight"), 1e-6);
}

TEST(WorldSizeInvariance, DocSplit) {
  ExpectInvariant(
      "docsplit", SeededSmithPretraining,
      [](torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
        data::MaskOptions masks = Masks();
        masks.masked_blocks = 0;
        const auto batch = data::BuildDocSplitBatch(Range(begin, end), {8, 12}, &masks, /*seed=*/3, /*epoch=*/0);
        auto holder = Borrow<model::SmithPretraining>(m);
        return train::DocSplit(holder, model::ToTensors(batch, torch::kCPU), comm);
      });
}

// Each rank's views padded to their own step bucket (fillers in blocks,
// tokens and predicted words): the objective, gradients and parameters of
// one rank's unpadded views of the global batch.
TEST(WorldSizeInvariance, DocSplitViewsPaddedToTheirStepBuckets) {
  const data::BlockOptions blocks{8, 12};
  const auto views_of = [blocks](int64_t begin, int64_t end) {
    data::MaskOptions masks = Masks();
    masks.masked_blocks = 0;
    return data::BuildDocSplitBatch(Range(begin, end), blocks, &masks, /*seed=*/3, /*epoch=*/0);
  };
  ExpectInvariant(
      "docsplit-bucketed", SeededSmithPretraining,
      [&](torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
        const data::BlockBatch views = views_of(begin, end);
        const data::StepCounts counts = data::CountStep(views);
        const data::StepShape shape =
            data::BucketFor(counts, views.B, views.K, blocks, data::StepBuckets{/*granularity=*/8, /*ratio=*/1.5});
        EXPECT_GT(shape.R, counts.R);
        EXPECT_GT(shape.M, counts.M);
        auto holder = Borrow<model::SmithPretraining>(m);
        return train::DocSplit(holder, model::ToTensors(views, torch::kCPU, &shape), comm, 0.05, 0.1, &counts);
      },
      4, 1e-9,
      [&](torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
        auto holder = Borrow<model::SmithPretraining>(m);
        return train::DocSplit(holder, model::ToTensors(views_of(begin, end), torch::kCPU), comm, 0.05, 0.1);
      });
}

// DocSplit on the flat encoder (pretrain on kind match_bert): mean pooling
// over up to two windows per half, with the word LM term.
TEST(WorldSizeInvariance, FlatDocSplit) {
  const model::MatchBertConfig c = MatchBertTiny();
  ExpectInvariant("flat-docsplit", SeededFlatPretraining(c),
                  [c](torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
                    const data::MaskOptions masks = Masks();
                    const auto batch =
                        data::BuildFlatDocSplitBatch(Range(begin, end), c.Flat(), &masks, /*seed=*/3, /*epoch=*/0);
                    auto holder = Borrow<model::FlatPretraining>(m);
                    return train::DocSplit(holder, batch, comm, 0.05, 0.1);
                  });
}

TEST(WorldSizeInvariance, Sdr) {
  ExpectInvariant(
      "sdr",
      [] {
        torch::manual_seed(0);
        model::SdrConfig c;
        c.vocab_size = 1005;
        c.hidden = 16;
        c.heads = 2;
        c.intermediate = 32;
        c.layers = 1;
        c.max_tokens = 16;
        c.dropout = 0.0;
        return model::SentenceEncoder(c).ptr();
      },
      [](torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
        const data::MaskOptions masks = Masks();
        const int64_t global = comm.size() * (end - begin);  // every rank holds end - begin documents
        const auto batch = data::BuildSdrBatch(Range(begin, end), {16}, &masks, 0, begin, global);
        auto holder = Borrow<model::SentenceEncoder>(m);
        return train::Sdr(holder, model::ToTensors(batch, torch::kCPU), comm);
      });
}

// SMITH's pair logit: amplifier * cosine of the two unit document vectors.
torch::Tensor PairLogits(model::SmithEncoder& e, const data::BlockBatch& a, const data::BlockBatch& b) {
  const model::BlockTensors ta = model::ToTensors(a, torch::kCPU), tb = model::ToTensors(b, torch::kCPU);
  return e->config().amplifier * (e(ta) * e(tb)).sum(1);
}

TEST(WorldSizeInvariance, SiameseFineTuning) {
  ExpectInvariant("siamese", SeededSmithEncoder,
                  [](torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
                    const auto a = data::BuildBlockBatch(Range(begin, end), {8, 12}, nullptr, 0);
                    const auto b = data::BuildBlockBatch(Range(begin, end, /*shift=*/32), {8, 12}, nullptr, 0);
                    std::vector<double> labels;
                    for (int64_t i = begin; i < end; ++i) labels.push_back(i % 2);
                    auto holder = Borrow<model::SmithEncoder>(m);
                    return train::Siamese(PairLogits(holder, a, b), torch::tensor(labels, torch::kFloat64), comm);
                  });
}

// Runs of `size` documents of [begin, end), each built by `build`.
template <typename Batch>
std::vector<Batch> InChunks(int64_t begin, int64_t end, int64_t size,
                            const std::function<Batch(const std::vector<const data::Document*>&)>& build) {
  std::vector<Batch> chunks;
  for (int64_t from = begin; from < end; from += size) chunks.push_back(build(Range(from, std::min(end, from + size))));
  return chunks;
}

// Gradient caching on SMITH's DocSplit with its LM term: each rank's 3
// documents in chunks of 2 and 1 against one pass over the global batch.
TEST(WorldSizeInvariance, CachedDocSplitEqualsThePlainGlobalBatch) {
  const auto loss = [](int64_t chunk) {
    return [chunk](torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
      data::MaskOptions masks = Masks();
      masks.masked_blocks = 0;
      const auto chunks = InChunks<data::BlockBatch>(begin, end, chunk, [&](const auto& docs) {
        return data::BuildDocSplitBatch(docs, {8, 12}, &masks, /*seed=*/3, /*epoch=*/0);
      });
      auto holder = Borrow<model::SmithPretraining>(m);
      return train::DocSplit(holder, chunks, comm, 0.05, 0.1);
    };
  };
  ExpectInvariant("cached-docsplit", SeededSmithPretraining, loss(2), /*steps=*/4,
                  // Measured at np 1: chunks pad to their own longest document, so sums
                  // run in another order; by step 3 Adam has grown that to parameter
                  // differences of 1e-11 and gradient differences of 2e-10 (gradients up
                  // to 0.2). A lost chunk or a wrong scale is off by 1e-2 or more.
                  /*parameter_atol=*/1e-9, loss(1 << 20), /*gradient_atol=*/1e-9);
}

// The same on the flat encoder, with the word LM's masks, in chunks of one document.
TEST(WorldSizeInvariance, CachedFlatDocSplitEqualsThePlainGlobalBatch) {
  const model::MatchBertConfig c = MatchBertTiny();
  const auto loss = [c](int64_t chunk) {
    return [c, chunk](torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
      const data::MaskOptions masks = Masks();
      const auto chunks = InChunks<data::FlatBatch>(begin, end, chunk, [&](const auto& docs) {
        return data::BuildFlatDocSplitBatch(docs, c.Flat(), &masks, /*seed=*/3, /*epoch=*/0);
      });
      auto holder = Borrow<model::FlatPretraining>(m);
      return train::DocSplit(holder, chunks, comm, 0.05, 0.1);
    };
  };
  ExpectInvariant("cached-flat-docsplit", SeededFlatPretraining(c), loss(1), /*steps=*/4, /*parameter_atol=*/1e-10,
                  loss(1 << 20));
}

// Contrastive fine-tuning: pair i is (document i, document 32 + i % 5), so
// targets repeat within and across ranks; every fourth target is the previous
// pair's source (often on another rank); one hard negative each, 48 + i % 3.
// The exclusions by corpus index must see every rank's ids.
// This rank's contrastive pairs [begin, end) as that test draws them.
train::ContrastivePairs EmbedContrastivePairs(model::SmithEncoder& encoder, int64_t begin, int64_t end,
                                              const torch::Device& device = torch::kCPU) {
  std::vector<int64_t> sources, targets, negatives;
  for (int64_t i = begin; i < end; ++i) {
    sources.push_back(i);
    targets.push_back(i % 4 == 3 ? i - 1 : 32 + i % 5);
    negatives.push_back(48 + i % 3);
  }
  const auto embed = [&](const std::vector<int64_t>& ids) {
    std::vector<const data::Document*> docs;
    for (int64_t id : ids) docs.push_back(&Documents()[id]);
    const model::BlockTensors t = model::ToTensors(data::BuildBlockBatch(docs, {8, 12}, nullptr, 0), device);
    return encoder(t);
  };
  const auto ids = [](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong); };
  return {embed(sources), embed(targets), ids(sources), ids(targets), embed(negatives), ids(negatives)};
}

train::Objective PlainContrastive(torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
  model::SmithEncoder holder = Borrow<model::SmithEncoder>(m);
  return train::Contrastive(EmbedContrastivePairs(holder, begin, end), /*temperature=*/0.1, comm);
}

TEST(WorldSizeInvariance, ContrastiveFineTuning) {
  ExpectInvariant("contrastive", SeededSmithEncoder, PlainContrastive,
                  /*steps=*/4,
                  // Measured: gradients agree to 1e-13 or better, but some of the document
                  // encoder's are 1e-9 (under Adam's eps), so parameters drift to 3e-10.
                  /*parameter_atol=*/1e-9);
}

// Gradient caching on contrastive fine-tuning as finetune --grad-cache runs
// it: each chunk of pairs embeds its sources, targets and hard negatives, the
// objective (duplicates masked across ranks, and with `related` what it labels
// related) runs over all chunks at once.
auto CachedContrastive(const train::RelatedPairs* related) {
  return [related](torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
    constexpr int64_t kChunk = 2;
    return train::ChunkedContrastive((end - begin + kChunk - 1) / kChunk,
                                     [&m, begin, end](int64_t i) {
                                       model::SmithEncoder holder = Borrow<model::SmithEncoder>(m);
                                       return EmbedContrastivePairs(holder, begin + i * kChunk,
                                                                    std::min(end, begin + (i + 1) * kChunk));
                                     },
                                     /*temperature=*/0.1, comm, related);
  };
}

TEST(WorldSizeInvariance, CachedContrastiveEqualsThePlainGlobalBatch) {
  ExpectInvariant("cached-contrastive", SeededSmithEncoder, CachedContrastive(nullptr),
                  /*steps=*/4, /*parameter_atol=*/1e-9, PlainContrastive);
}

// finetune --drop-related: each source i labelled related to the next pair's
// target (32 + (i + 1) % 5) and to the hard negative 48 + (i + 1) % 3, so the
// left-out candidates sit on every rank; plain and cached in chunks of 2 must
// give the 1-process global batch's loss and gradients.
const train::RelatedPairs& NextPairRelation() {
  struct Pair {
    int64_t source, target;
    int label;
  };
  static const train::RelatedPairs relation([] {
    std::vector<Pair> pairs;
    for (int64_t i = 0; i < 64; ++i) {
      pairs.push_back({i, 32 + (i + 1) % 5, 1});
      pairs.push_back({i, 48 + (i + 1) % 3, 1});
    }
    return pairs;
  }());
  return relation;
}

train::Objective DropRelatedContrastive(torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
  model::SmithEncoder holder = Borrow<model::SmithEncoder>(m);
  return train::Contrastive(EmbedContrastivePairs(holder, begin, end), /*temperature=*/0.1, comm, &NextPairRelation());
}

TEST(WorldSizeInvariance, ContrastiveDroppingLabelledRelatedCandidates) {
  ExpectInvariant("contrastive-drop-related", SeededSmithEncoder, DropRelatedContrastive, /*steps=*/4,
                  /*parameter_atol=*/1e-9);
  ExpectInvariant("cached-contrastive-drop-related", SeededSmithEncoder, CachedContrastive(&NextPairRelation()),
                  /*steps=*/4, /*parameter_atol=*/1e-9, DropRelatedContrastive);
}

// finetune --loss multipositive: the same relation's candidates are
// positives, not left out; plain and cached in chunks of 2 (as finetune
// --grad-cache runs it) must give the 1-process global batch's loss and
// gradients.
train::Objective MultiPositive(torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
  model::SmithEncoder holder = Borrow<model::SmithEncoder>(m);
  return train::MultiPositiveContrastive(EmbedContrastivePairs(holder, begin, end), /*temperature=*/0.1, comm,
                                         NextPairRelation());
}

train::Objective CachedMultiPositive(torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
  constexpr int64_t kChunk = 2;
  return train::ChunkedPairObjective(
      (end - begin + kChunk - 1) / kChunk,
      [&m, begin, end](int64_t i) {
        model::SmithEncoder holder = Borrow<model::SmithEncoder>(m);
        return EmbedContrastivePairs(holder, begin + i * kChunk, std::min(end, begin + (i + 1) * kChunk));
      },
      /*temperature=*/0.1,
      [&comm](const train::ContrastivePairs& pairs, const model::Temperature& t) {
        return train::MultiPositiveContrastive(pairs, t, comm, NextPairRelation());
      },
      comm.device());
}

TEST(WorldSizeInvariance, MultiPositiveContrastive) {
  ExpectInvariant("multipositive", SeededSmithEncoder, MultiPositive, /*steps=*/4, /*parameter_atol=*/1e-9);
  ExpectInvariant("cached-multipositive", SeededSmithEncoder, CachedMultiPositive, /*steps=*/4,
                  /*parameter_atol=*/1e-9, MultiPositive);
}

// finetune --learn-temperature: SMITH's encoder beside log(1 / tau) as one
// more parameter, which the synchronizer averages and Adam steps like the
// others; plain, and gradient-cached in chunks of 2 (the temperature's
// gradient then reaches it in the last chunk's pass).
class ScaledSmithEncoderImpl : public torch::nn::Module {
 public:
  ScaledSmithEncoderImpl() : encoder(register_module("encoder", model::SmithEncoder(SmithTiny()))) {
    log_scale = register_parameter("log_scale", torch::full({}, std::log(1.0 / 0.1)));
  }
  model::SmithEncoder encoder;
  torch::Tensor log_scale;
};
TORCH_MODULE(ScaledSmithEncoder);

std::shared_ptr<torch::nn::Module> SeededScaledSmithEncoder() {
  torch::manual_seed(0);
  return ScaledSmithEncoder().ptr();
}

Loss LearnedTemperatureContrastive(int64_t chunk) {
  return [chunk](torch::nn::Module& m, int64_t begin, int64_t end, dist::ProcessGroup& comm) {
    auto& scaled = dynamic_cast<ScaledSmithEncoderImpl&>(m);
    return train::ChunkedContrastive(
        (end - begin + chunk - 1) / chunk,
        [&scaled, begin, end, chunk](int64_t i) {
          return EmbedContrastivePairs(scaled.encoder, begin + i * chunk, std::min(end, begin + (i + 1) * chunk));
        },
        model::Temperature::Learned(scaled.log_scale), comm);
  };
}

TEST(WorldSizeInvariance, ContrastiveWithALearnedTemperature) {
  ExpectInvariant("contrastive-learned-temperature", SeededScaledSmithEncoder, LearnedTemperatureContrastive(1 << 20),
                  /*steps=*/4, /*parameter_atol=*/1e-9);
  ExpectInvariant("cached-contrastive-learned-temperature", SeededScaledSmithEncoder, LearnedTemperatureContrastive(2),
                  /*steps=*/4, /*parameter_atol=*/1e-9, LearnedTemperatureContrastive(1 << 20));
}

// A learned temperature is logged from the step's one copy of loss sums
// (Totals), not by a read of its own (issue 37, item 6: on a GPU an item()
// waits for the device's queue every step). A contrastive step, plain and
// cached, forward and backward, reads no value back, and the temperature it
// logs is tau = 1 / exp(log_scale) on every rank.
TEST(Contrastive, ALearnedTemperatureIsLoggedWithoutAReadOfItsOwn) {
  dist::ProcessGroup world;
  const int64_t begin = world.rank() * kPerRank, end = begin + kPerRank;
  torch::manual_seed(0);
  ScaledSmithEncoder model;
  model->to(torch::kFloat64);
  {
    torch::NoGradGuard no_grad;
    model->log_scale.fill_(std::log(1.0 / 0.07));
  }
  for (const int64_t chunk : {int64_t{1} << 20, int64_t{2}}) {
    std::vector<std::string> seen;
    train::Objective objective;
    {
      const model::testing::HostReads reads;
      objective = LearnedTemperatureContrastive(chunk)(*model, begin, end, world);
      train::Backward(objective, 1.0, [](bool) {});
      seen = reads.seen();
      EXPECT_GT(reads.ops(), 100) << "the recorder saw the step";
    }
    std::string names;
    for (const std::string& name : seen) names += name + " ";
    EXPECT_TRUE(seen.empty()) << "chunk " << chunk << ": " << names;
    EXPECT_NEAR(objective.parts.at("temperature"), 0.07, 1e-12) << "chunk " << chunk;
    model->zero_grad();
  }
}

// The re-run of each chunk draws the same dropout as its first pass: with
// dropout on, the cached gradients equal those of the chunks run once each
// with a graph, in order, from the same random state. On CUDA (issue 37) the
// first pass runs with grad mode on, so attention picks the kernel the re-run
// picks and consumes the generator alike; the check is in float32 there, the
// dtype training uses, to float32's rounding.
void ExpectRerunDrawsTheFirstPassDropout(const torch::Device& device, torch::Dtype dtype, double value_atol,
                                         double rtol, double atol) {
  dist::ProcessGroup self(MPI_COMM_SELF, device);
  model::SmithConfig config = SmithTiny();
  config.dropout = 0.3;
  torch::manual_seed(0);
  model::SmithEncoder cached(config), direct(config);
  cached->to(device, dtype);
  direct->to(device, dtype);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < cached->parameters().size(); ++i) direct->parameters()[i].copy_(cached->parameters()[i]);
  }
  constexpr int64_t kPairs = 6, kChunk = 2;
  const auto chunk = [&device](model::SmithEncoder& e, int64_t i) {
    const auto p = EmbedContrastivePairs(e, i * kChunk, (i + 1) * kChunk, device);
    return train::ChunkOutputs{{p.sources, p.targets, p.negatives, p.source_ids, p.target_ids, p.negative_ids}, {}, {}};
  };
  const auto objective = [&](const train::ChunkOutputs& all) {
    const auto& r = all.rows;
    return train::Contrastive({r[0], r[1], r[3], r[4], r[2], r[5]}, 0.1, self);
  };
  const auto gradients = [](model::SmithEncoder& e) {
    std::vector<torch::Tensor> g;
    for (const auto& p : e->parameters())
      g.push_back((p.grad().defined() ? p.grad() : torch::zeros_like(p)).to(torch::kCPU, torch::kFloat64));
    return g;
  };

  torch::manual_seed(7);
  const train::Objective c = train::CachedObjective(
      kPairs / kChunk, [&](int64_t i) { return chunk(cached, i); }, objective, device);
  train::Backward(c, 1.0, [](bool) {});
  // Chunks with a graph, one after another, the outputs joined as the cache joins them.
  torch::manual_seed(7);
  std::vector<train::ChunkOutputs> parts;
  for (int64_t i = 0; i < kPairs / kChunk; ++i) parts.push_back(chunk(direct, i));
  train::ChunkOutputs all;
  for (size_t r = 0; r < parts[0].rows.size(); ++r) {
    std::vector<torch::Tensor> rows;
    for (const auto& p : parts) rows.push_back(p.rows[r]);
    all.rows.push_back(torch::cat(rows));
  }
  const train::Objective d = objective(all);
  d.loss.backward();

  EXPECT_NEAR(c.value, d.value, value_atol);
  const auto gc = gradients(cached), gd = gradients(direct);
  double largest = 0;
  for (size_t i = 0; i < gc.size(); ++i) {
    EXPECT_TRUE(torch::allclose(gc[i], gd[i], rtol, atol)) << i << " max diff " << (gc[i] - gd[i]).abs().max();
    largest = std::max(largest, gd[i].abs().max().item<double>());
  }
  EXPECT_GT(largest, 0.0);
  // Dropout is live: the same chunks from another random state give another loss.
  torch::manual_seed(8);
  torch::NoGradGuard no_grad;
  std::vector<train::ChunkOutputs> other;
  for (int64_t i = 0; i < kPairs / kChunk; ++i) other.push_back(chunk(direct, i));
  EXPECT_FALSE(torch::allclose(other[0].rows[0], parts[0].rows[0].detach()));
}

TEST(GradientCache, RerunDrawsTheFirstPassDropout) {
  ExpectRerunDrawsTheFirstPassDropout(torch::kCPU, torch::kFloat64, 1e-12, 1e-9, 1e-12);
}

TEST(GradientCache, RerunOnCudaDrawsTheFirstPassDropout) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  // TF32 off: the cached and the direct run then differ only in float32 summation order.
  at::globalContext().setAllowTF32CuBLAS(false);
  ExpectRerunDrawsTheFirstPassDropout(torch::kCUDA, torch::kFloat32, 1e-5, 1e-3, 1e-5);
}

// A float64 tiny SMITH, the same weights every call, and the Siamese loss
// over pairs [from, to) against the documents 32 further on.
model::SmithEncoder Float64Tiny() {
  torch::manual_seed(0);
  model::SmithEncoder e(SmithTiny());
  e->to(torch::kFloat64);
  return e;
}
train::Objective TinyPairs(model::SmithEncoder& e, int64_t from, int64_t to, dist::ProcessGroup& world) {
  const auto a = data::BuildBlockBatch(Range(from, to), {8, 12}, nullptr, 0);
  const auto b = data::BuildBlockBatch(Range(from, to, 32), {8, 12}, nullptr, 0);
  std::vector<double> labels;
  for (int64_t i = from; i < to; ++i) labels.push_back(i % 2);
  return train::Siamese(PairLogits(e, a, b), torch::tensor(labels, torch::kFloat64), world);
}

TEST(GradientSynchronizer, AccumulationOverMicroStepsEqualsOneLargerStep) {
  // Two micro-steps of (b - 1) and 1 pairs, each loss over its own pairs,
  // weighted by its share, equal one step over all b pairs.
  dist::ProcessGroup world;
  const int64_t begin = world.rank() * kPerRank, end = begin + kPerRank;
  auto objective = [&](model::SmithEncoder& e, int64_t from, int64_t to) { return TinyPairs(e, from, to, world); };
  model::SmithEncoder accumulated = Float64Tiny(), whole = Float64Tiny();
  dist::GradientSynchronizer sync_accumulated(accumulated->parameters(), world), sync_whole(whole->parameters(), world);
  sync_accumulated.Prepare(/*sync=*/false);
  (objective(accumulated, begin, end - 1).loss * (double(kPerRank - 1) / kPerRank)).backward();
  sync_accumulated.Prepare(/*sync=*/true);
  (objective(accumulated, end - 1, end).loss * (1.0 / kPerRank)).backward();
  sync_accumulated.Finalize();
  sync_whole.Prepare(true);
  objective(whole, begin, end).loss.backward();
  sync_whole.Finalize();
  const auto pa = accumulated->parameters(), pw = whole->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::allclose(pa[i].grad(), pw[i].grad(), 1e-8, 1e-11)) << i;
}

TEST(GradientSynchronizer, ALevelFrozenOnTheFirstStepIsSyncedOnceUnfrozen) {
  // finetune --freeze-sentence-steps turns requires_grad off for SMITH's
  // sentence level during the first steps (no graph through it). The first
  // synced step also rebuilds the buckets from the gradients that came; the
  // frozen parameters must keep their slots, so that once unfrozen their
  // gradients are the same as a synchronizer that never froze them.
  dist::ProcessGroup world;
  const int64_t begin = world.rank() * kPerRank, end = begin + kPerRank;
  auto objective = [&](model::SmithEncoder& e) { return TinyPairs(e, begin, end, world); };
  model::SmithEncoder frozen = Float64Tiny(), plain = Float64Tiny();
  dist::GradientSynchronizer sync_frozen(frozen->parameters(), world), sync_plain(plain->parameters(), world);
  std::vector<torch::Tensor> lower;
  for (const auto& p : frozen->named_parameters()) {
    if (model::SmithSentenceLevel(p.key())) lower.push_back(p.value());
  }
  ASSERT_GT(lower.size(), 4u);
  for (torch::Tensor& p : lower) p.requires_grad_(false);
  sync_frozen.Prepare(/*sync=*/true);
  objective(frozen).loss.backward();
  sync_frozen.Finalize();
  for (const auto& p : frozen->named_parameters()) {
    EXPECT_EQ(p.value().grad().defined(), !model::SmithSentenceLevel(p.key())) << p.key();
  }
  for (torch::Tensor& p : frozen->parameters()) p.mutable_grad() = torch::Tensor();
  for (torch::Tensor& p : lower) p.requires_grad_(true);
  for (auto* sync : {&sync_frozen, &sync_plain}) sync->Prepare(/*sync=*/true);
  objective(frozen).loss.backward();
  objective(plain).loss.backward();
  sync_frozen.Finalize();
  sync_plain.Finalize();
  const auto pf = frozen->named_parameters(), pp = plain->named_parameters();
  for (size_t i = 0; i < pf.size(); ++i) {
    ASSERT_TRUE(pf[i].value().grad().defined()) << pf[i].key();
    EXPECT_TRUE(torch::allclose(pf[i].value().grad(), pp[i].value().grad(), 1e-10, 1e-12)) << pf[i].key();
  }
}

TEST(GradientSynchronizer, Bf16CommunicationStaysCloseToFp32) {
  dist::ProcessGroup world;
  torch::manual_seed(world.rank());
  torch::nn::Linear a(64, 64), b(64, 64);
  {
    torch::NoGradGuard no_grad;
    b->weight.copy_(a->weight);
    b->bias.copy_(a->bias);
  }
  dist::SynchronizerOptions bf16;
  bf16.bf16 = true;
  dist::GradientSynchronizer exact(a->parameters(), world), rounded(b->parameters(), world, bf16);
  exact.BroadcastParameters();
  rounded.BroadcastParameters();
  const torch::Tensor x = torch::randn({8, 64});
  exact.Prepare(true);
  a(x).pow(2).sum().backward();
  exact.Finalize();
  rounded.Prepare(true);
  b(x).pow(2).sum().backward();
  rounded.Finalize();
  const double scale = a->weight.grad().abs().max().item<double>();
  const double difference = (a->weight.grad() - b->weight.grad()).abs().max().item<double>();
  EXPECT_LT(difference, 0.02 * scale);
  if (world.size() == 1) {
    // One rank sends nothing, so nothing is rounded: the gradients are autograd's own.
    EXPECT_EQ(difference, 0.0);
  } else {
    // The bf16 wire really rounded: an fp32 path would give identical gradients.
    EXPECT_GT(difference, 0.0);
  }
}

}  // namespace
}  // namespace docmatch
