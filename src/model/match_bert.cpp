#include "model/match_bert.h"

#include "data/tokenizer.h"

namespace docmatch::model {

torch::Tensor ToTensor(const data::FlatBatch& batch, const torch::Device& device) {
  return torch::from_blob(const_cast<int32_t*>(batch.tokens.data()), {batch.B, batch.T}, torch::kInt32)
      .to(device, torch::kLong);
}

FlatEncoderImpl::FlatEncoderImpl(const MatchBertConfig& config) : config_(config) {
  embeddings = register_module("embeddings", Embeddings(config.vocab_size, config.max_tokens, config.Transformer()));
  encoder_ = register_module("encoder", TransformerEncoder(config.Transformer()));
  dense_ = register_module("dense", torch::nn::Linear(config.hidden, config.hidden));
  InitializeBertStyle(*this);
}

torch::Tensor FlatEncoderImpl::Encode(const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.size(1) <= config_.max_tokens, "sequence of ", tokens.size(1), " tokens exceeds MatchBERT's ",
              config_.max_tokens);
  return encoder_(embeddings(tokens), tokens.ne(data::kPadId));
}

torch::Tensor FlatEncoderImpl::forward(const torch::Tensor& tokens) {
  const torch::Tensor cls = Encode(tokens).select(1, 0);  // (B, C)
  return torch::nn::functional::normalize(dense_(cls), torch::nn::functional::NormalizeFuncOptions().dim(-1));
}

}  // namespace docmatch::model
