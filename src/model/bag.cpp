// The bag of embeddings (bag.h): the encoder, its DocumentModel and its row
// of the kind registry.
#include "model/bag.h"

#include <algorithm>

#include "model/config.h"
#include "model/document_model.h"
#include "model/host_to_device.h"
#include "model/kinds.h"

namespace docmatch::model {
namespace F = torch::nn::functional;

BagBatch BuildBagBatch(const std::vector<const data::Document*>& documents, const BagConfig& config) {
  BagBatch batch;
  for (const data::Document* d : documents) {
    batch.offsets.push_back(static_cast<int64_t>(batch.tokens.size()));
    const int64_t n = std::min(d->num_tokens(), config.max_tokens);
    batch.tokens.insert(batch.tokens.end(), d->tokens.begin(), d->tokens.begin() + n);
  }
  return batch;
}

BagEncoderImpl::BagEncoderImpl(const BagConfig& config) {
  const auto embeddings = register_module("embeddings", std::make_shared<torch::nn::Module>());
  tokens = embeddings->register_module("tokens", torch::nn::Embedding(config.vocab_size, config.hidden));
  torch::NoGradGuard no_grad;
  tokens->weight.normal_(0.0, 0.02);  // BERT's initialisation
}

torch::Tensor BagEncoderImpl::forward(const BagBatch& batch, const torch::Device& device) {
  const auto count = [](const std::vector<int64_t>& v) { return static_cast<int64_t>(v.size()); };
  const torch::Tensor ids =
      HostToDevice(batch.tokens.data(), {count(batch.tokens)}, torch::kInt64, device, torch::kLong);
  const torch::Tensor offsets =
      HostToDevice(batch.offsets.data(), {count(batch.offsets)}, torch::kInt64, device, torch::kLong);
  const torch::Tensor means =
      F::embedding_bag(ids, tokens->weight, F::EmbeddingBagFuncOptions().offsets(offsets).mode(torch::kMean));
  return F::normalize(means, F::NormalizeFuncOptions().dim(-1));  // (B, C)
}

namespace {

class BagModel : public DocumentModel {
 public:
  explicit BagModel(const ModelConfig& config) : DocumentModel(config), encoder_(config.bag) {}
  torch::nn::Module& module() override { return *encoder_; }
  int64_t dimension() const override { return config().bag.hidden; }
  std::shared_ptr<const HostBatch> Batch(const std::vector<const data::Document*>& documents) const override {
    return std::make_shared<HeldBatch<BagBatch>>(BuildBagBatch(documents, config().bag));
  }
  torch::Tensor EmbedBatch(const HostBatch& batch, const torch::Device& device) override {
    return encoder_(BatchOf<BagBatch>(batch), device);
  }
  int64_t TokensRead(const data::Document& document) const override {
    return std::min(document.num_tokens(), config().bag.max_tokens);
  }
  torch::Tensor PairLogits(const torch::Tensor& a, const torch::Tensor& b) override {
    return CosineLogits(a, b, config().bag.amplifier);
  }
  torch::Tensor ScoreMatrix(const torch::Tensor& q, const torch::Tensor& c) override {
    return CosineMatrix(q, c, config().bag.amplifier);
  }

 private:
  BagEncoder encoder_;
};

ConfigKeys Keys(ModelConfig& config) {
  BagConfig& c = config.bag;
  return {{"vocab_size", Key(&c.vocab_size)},
          {"hidden", Key(&c.hidden)},
          {"max_tokens", Key(&c.max_tokens)},
          {"amplifier", Key(&c.amplifier)}};
}

void Check(const ModelConfig& config, const std::string& origin) {
  const BagConfig& c = config.bag;
  KeyAtLeast(origin, "vocab_size", c.vocab_size, 1, "token embeddings");
  KeyAtLeast(origin, "hidden", c.hidden, 1, "channels");
  KeyAtLeast(origin, "max_tokens", c.max_tokens, 1, "tokens a document");
  KeyAtLeast(origin, "amplifier", c.amplifier, 0, "the pair logit's scale");
}

std::unique_ptr<DocumentModel> Create(const ModelConfig& config) { return std::make_unique<BagModel>(config); }

}  // namespace

const ModelKind& BagKind() {
  static const ModelKind kind{"bag",
                              "a bag of embeddings: the mean of the first max_tokens token embeddings",
                              Keys,
                              Check,
                              Create,
                              /*pair_classifier=*/true,
                              /*lower_level=*/nullptr,
                              "a larger max_tokens in the model config averages more of each document",
                              /*hf_layout=*/nullptr};
  return kind;
}

}  // namespace docmatch::model
