// How the rest of docmatch sees a SMITH model: its DocumentModel, its
// config keys and checks, and its row of the kind registry (model/kinds.h).
#include <algorithm>

#include "data/batches/step_buckets.h"
#include "model/config.h"
#include "model/document_model.h"
#include "model/host_to_device.h"
#include "model/kinds.h"

namespace docmatch::model {
namespace {

class SmithModel : public DocumentModel {
 public:
  explicit SmithModel(const ModelConfig& config) : DocumentModel(config), encoder_(config.smith) {}
  torch::nn::Module& module() override { return *encoder_; }
  int64_t dimension() const override { return encoder_->dimension(); }
  std::shared_ptr<const HostBatch> Batch(const std::vector<const data::Document*>& documents) const override {
    return std::make_shared<HeldBatch<data::BlockBatch>>(
        data::BuildBlockBatch(documents, config().smith.Blocks(), nullptr, 0));
  }
  torch::Tensor EmbedBatch(const HostBatch& batch, const torch::Device& device) override {
    if (!step_buckets()) return encoder_(ToTensors(BatchOf<data::BlockBatch>(batch), device));
    return EmbedPadded(Pad(batch, device));
  }
  bool takes_step_buckets() const override { return true; }
  // Fillers are blocks and tokens, never documents: filler blocks sit in a
  // row past the (B, S) grid, which the document level never reads. What the
  // encoder reads, no more: the tokens, the block mask and the layout's real
  // blocks, real tokens and counts.
  PaddedBatch Pad(const HostBatch& batch, const torch::Device& device) const override {
    const data::BlockBatch& b = BatchOf<data::BlockBatch>(batch);
    const data::StepShape shape =
        data::BucketFor(data::CountStep(b), b.B, b.K, config().smith.Blocks(), data::StepBuckets{});
    const BlockTensors t = ToTensors(b, device, &shape);
    return {{t.tokens, t.block_mask, t.layout.real, t.layout.tokens, t.layout.counts},
            {b.B, shape.S, shape.T, shape.R, shape.N, shape.M, shape.P}};
  }
  torch::Tensor EmbedPadded(const PaddedBatch& batch) override {
    const std::vector<torch::Tensor>& v = batch.tensors;
    TORCH_CHECK(v.size() == 5, "a padded SMITH batch has 5 tensors, not ", v.size());
    BlockTensors t;
    t.tokens = v[0];
    t.block_mask = v[1];
    t.layout.real = v[2];
    t.layout.tokens = v[3];
    t.layout.counts = v[4];
    return encoder_(t);
  }
  int64_t TokensRead(const data::Document& document) const override {
    const data::BlockOptions blocks = config().smith.Blocks();
    const int64_t special = blocks.separator ? 2 : 1;  // [CLS] (+ [SEP]) in every block
    int64_t read = 0;
    for (const auto& block : data::PackBlocks(document, blocks)) read += static_cast<int64_t>(block.size()) - special;
    return read;
  }
  torch::Tensor PairLogits(const torch::Tensor& a, const torch::Tensor& b) override {
    return CosineLogits(a, b, config().smith.amplifier);
  }
  torch::Tensor ScoreMatrix(const torch::Tensor& q, const torch::Tensor& c) override {
    return CosineMatrix(q, c, config().smith.amplifier);
  }

 private:
  SmithEncoder encoder_;
};

ConfigKeys Keys(ModelConfig& config) {
  SmithConfig& c = config.smith;
  return TransformerKeys(&c, {{"sentence_layers", Key(&c.sentence_layers)},
                              {"document_layers", Key(&c.document_layers)},
                              {"block_length", Key(&c.block_length)},
                              {"max_blocks", Key(&c.max_blocks)},
                              {"combine", Key(&c.combine)},
                              {"block_pooling", Key(&c.block_pooling)},
                              {"separator", Key(&c.separator)},
                              {"amplifier", Key(&c.amplifier)}});
}

void Check(const ModelConfig& config, const std::string& origin) {
  const SmithConfig& c = config.smith;
  CheckTransformerKeys(c, origin);
  KeyAtLeast(origin, "sentence_layers", c.sentence_layers, 1, "the sentence-block encoder");
  KeyAtLeast(origin, "document_layers", c.document_layers, 0, "layers");
  KeyAtLeast(origin, "block_length", c.block_length, c.separator ? 3 : 2,
             c.separator ? "a block holds [CLS], [SEP] and a word" : "a block holds [CLS] and a word");
  KeyAtLeast(origin, "max_blocks", c.max_blocks, 1, "blocks a document");
  KeyAtLeast(origin, "amplifier", c.amplifier, 0, "the pair logit's scale");
}

// Its sentence encoder with the block head: a text read as one block, its
// vector the block vector (cls: L2(ReLU(dense([CLS]))); mean: L2(mean of the
// token states)). The document level stays behind, so the folder is a part.
HfLayout HfFolder(const ModelConfig& config) {
  const SmithConfig& s = config.smith;
  HfLayout e{"SMITH's sentence encoder (a text read as one block: its block vector)",
             "sentence_encoder",
             s.vocab_size,
             s.hidden,
             s.sentence_layers,
             s.heads,
             s.intermediate,
             s.block_length,
             s.dropout,
             s.separator,
             s.block_pooling};
  if (s.block_pooling == "cls") {
    e.dense = "block_dense";
    e.activation = "torch.nn.modules.activation.ReLU";
  }
  e.left_out = {"block_positions.", "document_", "attention_"};
  e.whole_model = false;
  e.caveat = "the whole SMITH model exports with --format docmatch";
  return e;
}

std::unique_ptr<DocumentModel> Create(const ModelConfig& config) { return std::make_unique<SmithModel>(config); }

}  // namespace

const ModelKind& SmithKind() {
  static const ModelKind kind{"smith",
                              "hierarchical: sentence blocks, then a document transformer (Yang et al. 2020)",
                              Keys,
                              Check,
                              Create,
                              /*pair_classifier=*/true,
                              /*lower_level=*/SmithSentenceLevel,
                              "a larger max_blocks or block_length in the model config reads more",
                              HfFolder};
  return kind;
}

}  // namespace docmatch::model
