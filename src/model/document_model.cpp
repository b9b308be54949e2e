// What every kind's DocumentModel shares (document_model.h); each kind's own
// is in model/<kind>_kind.cpp.
#include "model/document_model.h"

namespace docmatch::model {
namespace F = torch::nn::functional;
namespace {

torch::Tensor Normalize(const torch::Tensor& x) { return F::normalize(x, F::NormalizeFuncOptions().dim(-1)); }

}  // namespace

// Unit vectors: the pair logit is amplifier * cosine.
torch::Tensor CosineLogits(const torch::Tensor& a, const torch::Tensor& b, double amplifier) {
  return amplifier * (Normalize(a) * Normalize(b)).sum(1);
}
torch::Tensor CosineMatrix(const torch::Tensor& q, const torch::Tensor& c, double amplifier) {
  return amplifier * torch::matmul(Normalize(q), Normalize(c).t());
}

torch::Tensor MeanSentenceVector(const DocumentSentences& document) { return Normalize(document.vectors.mean(0)); }

std::unique_ptr<DocumentModel> DocumentModel::Create(const ModelConfig& config) {
  return FindModelKind(config.kind, "model config").create(config);
}

std::vector<DocumentSentences> DocumentModel::EmbedSentences(const std::vector<const data::Document*>&,
                                                             const torch::Device&) {
  throw std::logic_error("a " + config_.kind + " model has no sentence vectors");
}

DocumentModel::PaddedBatch DocumentModel::Pad(const HostBatch&, const torch::Device&) const {
  throw std::logic_error("a " + config_.kind + " model takes no step buckets");
}

torch::Tensor DocumentModel::EmbedPadded(const PaddedBatch&) {
  throw std::logic_error("a " + config_.kind + " model takes no step buckets");
}

}  // namespace docmatch::model
