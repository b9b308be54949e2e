// SDR's sentence encoder and its pre-training heads (masked LM and the sentence
// pair contrastive loss) (sdr.h).
#include "model/sdr.h"

#include "data/text/tokenizer.h"
#include "model/host_to_device.h"
#include "model/losses.h"

namespace docmatch::model {

namespace {

// Mean of the token states over real (non-pad) tokens: (B, T, C) -> (B, C).
torch::Tensor MeanPool(const torch::Tensor& states, const torch::Tensor& tokens) {
  const torch::Tensor real = tokens.ne(data::kPadId).unsqueeze(-1).to(states.dtype());  // (B, T, 1)
  return (states * real).sum(1) / real.sum(1).clamp_min(1.0);
}

}  // namespace

SdrTensors ToTensors(const data::SdrBatch& batch, const torch::Device& device) {
  auto ids = [&](const std::vector<int32_t>& v) {
    return HostToDevice(v.data(), {batch.B, batch.T}, torch::kInt32, device, torch::kLong);
  };
  SdrTensors t;
  t.anchors = ids(batch.anchors);
  t.anchor_labels = ids(batch.anchor_labels);
  t.partners = ids(batch.partners);
  t.partner_labels = ids(batch.partner_labels);
  t.pair = HostToDevice(batch.pair.data(), {batch.B}, torch::kInt64, device, torch::kInt64);
  t.label = HostToDevice(batch.label.data(), {batch.B}, torch::kFloat32, device, torch::kFloat32);
  t.predicted = LabelledPositions({&batch.anchor_labels, &batch.partner_labels}, data::kIgnoreLabel, device);
  return t;
}

SentenceEncoderImpl::SentenceEncoderImpl(const SdrConfig& config) : config_(config) {
  TORCH_CHECK(
      config.max_tokens > (config.separator ? 2 : 0), "SDR model key max_tokens is ", config.max_tokens,
      config.separator ? "; with separator ([CLS] and [SEP]) it must be at least 3" : "; it must be at least 1");
  embeddings = register_module("embeddings", Embeddings(config.vocab_size, config.max_tokens, config.Transformer()));
  encoder_ = register_module("encoder", TransformerEncoder(config.Transformer()));
  lm_transform_ = register_module("lm_transform", torch::nn::Linear(config.hidden, config.hidden));
  lm_norm_ = register_module("lm_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.hidden}).eps(1e-12)));
  lm_bias_ = register_parameter("lm_bias", torch::zeros({config.vocab_size}));
  InitializeBertStyle(*this);
}

torch::Tensor SentenceEncoderImpl::Encode(const torch::Tensor& tokens) {
  return encoder_(embeddings(tokens), tokens.ne(data::kPadId));
}

torch::Tensor SentenceEncoderImpl::forward(const torch::Tensor& tokens) { return MeanPool(Encode(tokens), tokens); }

torch::Tensor SentenceEncoderImpl::LanguageModel(const torch::Tensor& states) {
  return torch::matmul(lm_norm_(torch::gelu(lm_transform_(states))), embeddings->tokens->weight.t()) + lm_bias_;
}

SentenceEncoderImpl::PairOutputs SentenceEncoderImpl::ForwardPairs(const SdrTensors& batch) {
  // One pass over anchors and partners together (same T by construction).
  const torch::Tensor tokens = torch::cat({batch.anchors, batch.partners}, 0);  // (2B, T)
  const torch::Tensor labels = torch::cat({batch.anchor_labels, batch.partner_labels}, 0);
  const torch::Tensor states = Encode(tokens);  // (2B, T, C)
  const torch::Tensor vectors = MeanPool(states, tokens);
  const int64_t B = batch.anchors.size(0);
  const torch::Tensor predicted = states.reshape({labels.numel(), -1}).index_select(0, batch.predicted);  // (M, C)
  return {vectors.slice(0, 0, B), vectors.slice(0, B), LanguageModel(predicted),
          labels.reshape({-1}).index_select(0, batch.predicted)};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> SentenceEncoderImpl::Loss(const SdrTensors& batch) {
  const PairOutputs out = ForwardPairs(batch);
  const torch::Tensor contrastive =
      SdrContrastiveLoss(out.anchors, out.partners, batch.pair, batch.label, config_.margin);
  const torch::Tensor lm = MaskedLmLoss(out.lm_logits, out.lm_labels);
  return {lm + contrastive, contrastive, lm};
}

}  // namespace docmatch::model
