// MatchBERT's forward: the flat transformer over each window, pooling, window
// averaging and the normalised vector (match_bert.h).
#include "model/match_bert.h"

#include "data/text/tokenizer.h"

namespace docmatch::model {

torch::Tensor ToTensor(const data::FlatBatch& batch, const torch::Device& device) {
  return torch::from_blob(const_cast<int32_t*>(batch.tokens.data()), {batch.B, batch.T}, torch::kInt32)
      .to(device, torch::kLong);
}

FlatEncoderImpl::FlatEncoderImpl(const MatchBertConfig& config) : config_(config) {
  embeddings = register_module("embeddings", Embeddings(config.vocab_size, config.max_tokens, config.Transformer()));
  encoder_ = register_module("encoder", TransformerEncoder(config.Transformer()));
  TORCH_CHECK(config.pooling == "cls" || config.pooling == "mean", "MatchBERT pooling '", config.pooling,
              "' is not cls or mean");
  TORCH_CHECK(config.chunks >= 1, "MatchBERT chunks must be at least 1, not ", config.chunks);
  if (config.pooling == "cls") dense_ = register_module("dense", torch::nn::Linear(config.hidden, config.hidden));
  InitializeBertStyle(*this);
}

torch::Tensor FlatEncoderImpl::Encode(const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.size(1) <= config_.max_tokens, "sequence of ", tokens.size(1), " tokens exceeds MatchBERT's ",
              config_.max_tokens);
  return encoder_(embeddings(tokens), tokens.ne(data::kPadId));
}

torch::Tensor FlatEncoderImpl::forward(const torch::Tensor& tokens) {
  namespace F = torch::nn::functional;
  const torch::Tensor states = Encode(tokens);  // (B, T, C)
  torch::Tensor pooled;
  if (config_.pooling == "mean") {
    const torch::Tensor real = tokens.ne(data::kPadId).unsqueeze(-1).to(states.scalar_type());  // (B, T, 1)
    pooled = (states * real).sum(1) / real.sum(1).clamp_min(1.0);
  } else {
    pooled = dense_(states.select(1, 0));
  }
  return F::normalize(pooled, F::NormalizeFuncOptions().dim(-1));
}

torch::Tensor FlatEncoderImpl::Documents(const data::FlatBatch& batch, int64_t documents, const torch::Device& device) {
  namespace F = torch::nn::functional;
  const torch::Tensor rows = forward(ToTensor(batch, device));
  if (batch.B == documents) return rows;
  const torch::Tensor owner = torch::tensor(batch.row_document, torch::kLong).to(device);
  const torch::Tensor sums =
      torch::zeros({documents, rows.size(1)}, rows.options()).index_add_(0, owner, rows);  // mean up to scale
  return F::normalize(sums, F::NormalizeFuncOptions().dim(-1));
}

}  // namespace docmatch::model
