// MatchBERT's forward: the flat transformer over each window, pooling, window
// averaging and the normalised vector (match_bert.h).
#include "model/match_bert.h"

#include "data/text/tokenizer.h"
#include "model/host_to_device.h"
#include "model/losses.h"

namespace docmatch::model {

torch::Tensor ToTensor(const data::FlatBatch& batch, const torch::Device& device) {
  return HostToDevice(batch.tokens.data(), {batch.B, batch.T}, torch::kInt32, device, torch::kLong);
}

FlatEncoderImpl::FlatEncoderImpl(const MatchBertConfig& config) : config_(config) {
  embeddings = register_module("embeddings", Embeddings(config.vocab_size, config.max_tokens, config.Transformer()));
  encoder_ = register_module("encoder", TransformerEncoder(config.Transformer()));
  TORCH_CHECK(config.pooling == "cls" || config.pooling == "mean", "MatchBERT pooling '", config.pooling,
              "' is not cls or mean");
  TORCH_CHECK(config.chunks >= 1, "MatchBERT chunks must be at least 1, not ", config.chunks);
  TORCH_CHECK(config.window_pooling == "mean" || config.window_pooling == "max" ||
                  config.window_pooling == "attention" || config.window_pooling == "maxsim",
              "MatchBERT window_pooling '", config.window_pooling, "' is not mean, max, attention or maxsim");
  if (config.pooling == "cls") dense_ = register_module("dense", torch::nn::Linear(config.hidden, config.hidden));
  if (config.window_pooling == "attention") {
    window_projection_ = register_module("window_projection", torch::nn::Linear(config.hidden, config.hidden));
    window_context_ = register_parameter("window_context", torch::zeros({config.hidden}));
  }
  InitializeBertStyle(*this);
  if (window_context_.defined()) {
    torch::NoGradGuard no_grad;
    window_context_.zero_();  // uniform weights at the start: the mean of the windows
  }
}

torch::Tensor FlatEncoderImpl::Encode(const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.size(1) <= config_.max_tokens, "sequence of ", tokens.size(1), " tokens exceeds MatchBERT's ",
              config_.max_tokens);
  return encoder_(embeddings(tokens), tokens.ne(data::kPadId));
}

torch::Tensor FlatEncoderImpl::Pool(const torch::Tensor& states, const torch::Tensor& tokens) {
  namespace F = torch::nn::functional;
  torch::Tensor pooled;
  if (config_.pooling == "mean") {
    const torch::Tensor real = tokens.ne(data::kPadId).unsqueeze(-1).to(states.scalar_type());  // (B, T, 1)
    pooled = (states * real).sum(1) / real.sum(1).clamp_min(1.0);
  } else {
    pooled = dense_(states.select(1, 0));
  }
  return F::normalize(pooled, F::NormalizeFuncOptions().dim(-1));
}

torch::Tensor FlatEncoderImpl::forward(const torch::Tensor& tokens) { return Pool(Encode(tokens), tokens); }

torch::Tensor PoolRowsByDocument(const torch::Tensor& rows, const torch::Tensor& owner, int64_t documents,
                                 const std::string& pooling) {
  namespace F = torch::nn::functional;
  const int64_t C = rows.size(1);
  const torch::Tensor zeros = torch::zeros({documents, C}, rows.options());
  const torch::Tensor pooled =
      pooling == "max" ? zeros.scatter_reduce(0, owner.unsqueeze(1).expand({-1, C}), rows, "amax", /*include_self=*/false)
                       : zeros.index_add(0, owner, rows);  // the mean, up to scale
  return F::normalize(pooled, F::NormalizeFuncOptions().dim(-1));
}

torch::Tensor FlatEncoderImpl::PoolWindows(const torch::Tensor& rows, const data::FlatBatch& batch) {
  namespace F = torch::nn::functional;
  if (batch.B == batch.documents) return rows;
  const torch::Tensor owner =
      HostToDevice(batch.row_document.data(), {batch.B}, torch::kInt64, rows.device(), torch::kLong);  // (B,)
  if (config_.window_pooling != "attention") return PoolRowsByDocument(rows, owner, batch.documents, config_.window_pooling);
  // A softmax over each document's windows: exp(score - the document's
  // largest score), summed per document.
  const torch::Tensor scores = (torch::tanh(window_projection_(rows)) * window_context_).sum(1);  // (B,)
  const torch::Tensor largest = torch::full({batch.documents}, -1e30, scores.options())
                                    .scatter_reduce(0, owner, scores.detach(), "amax", /*include_self=*/true);
  const torch::Tensor weights = torch::exp(scores - largest.index_select(0, owner));  // (B,)
  const torch::Tensor totals = torch::zeros({batch.documents}, scores.options()).index_add(0, owner, weights);
  const torch::Tensor pooled = torch::zeros({batch.documents, rows.size(1)}, rows.options())
                                   .index_add(0, owner, rows * (weights / totals.index_select(0, owner)).unsqueeze(1));
  return F::normalize(pooled, F::NormalizeFuncOptions().dim(-1));
}

torch::Tensor FlatEncoderImpl::RowsWithoutGraph(const data::FlatBatch& batch, const torch::Device& device) {
  return EncodeRowsWithoutGraph(batch.tokens.data(), batch.B, batch.T, device, kRowsPerPass,
                                [this](const torch::Tensor& tokens) { return forward(tokens); });
}

torch::Tensor FlatEncoderImpl::Documents(const data::FlatBatch& batch, const torch::Device& device) {
  if (!torch::GradMode::is_enabled()) return PoolWindows(RowsWithoutGraph(batch, device), batch);
  return PoolWindows(forward(ToTensor(batch, device)), batch);
}

FlatPretrainingImpl::FlatPretrainingImpl(FlatEncoder shared, const MatchBertConfig& config) {
  const int64_t C = config.hidden;
  encoder = register_module("encoder", std::move(shared));
  lm_transform_ = register_module("lm_transform", torch::nn::Linear(C, C));
  lm_norm_ = register_module("lm_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C}).eps(1e-12)));
  lm_bias_ = register_parameter("lm_bias", torch::zeros({config.vocab_size}));
  torch::NoGradGuard no_grad;
  lm_transform_->weight.normal_(0.0, 0.02);
  lm_transform_->bias.zero_();
}

namespace {

// The batch's LM labels as (B, T) int64 on `device`; undefined without masks.
torch::Tensor Labels(const data::FlatBatch& batch, const torch::Device& device) {
  if (batch.lm_labels.empty()) return {};
  return HostToDevice(batch.lm_labels.data(), {batch.B, batch.T}, torch::kInt32, device, torch::kLong);
}

}  // namespace

void FlatPretrainingImpl::AddLanguageModel(const torch::Tensor& states, const torch::Tensor& labels,
                                           const torch::Tensor& predicted, Outputs* out) {
  const torch::Tensor flat = labels.reshape({-1});
  out->lm_hidden = lm_norm_(torch::gelu(lm_transform_(states.reshape({flat.size(0), -1}).index_select(0, predicted))));
  out->lm_labels = flat.index_select(0, predicted);
}

FlatPretrainingImpl::Outputs FlatPretrainingImpl::forward(const data::FlatBatch& batch, const torch::Device& device) {
  const torch::Tensor tokens = ToTensor(batch, device);
  const torch::Tensor states = encoder->Encode(tokens);  // (B, T, C)
  Outputs out;
  out.vectors = encoder->PoolWindows(encoder->Pool(states, tokens), batch);
  if (!batch.lm_labels.empty()) {
    AddLanguageModel(states, Labels(batch, device), LabelledPositions({&batch.lm_labels}, data::kIgnoreLabel, device),
                     &out);
  }
  return out;
}

FlatPretrainingImpl::Outputs FlatPretrainingImpl::ForwardViews(const data::FlatBatch& views,
                                                               const torch::Device& device, bool language_model) {
  const torch::Tensor masked = ToTensor(views, device);
  const torch::Tensor labels = Labels(views, device);
  // Every predicted position's label is its original token (BERT's rule).
  const torch::Tensor clean = labels.defined() ? torch::where(labels.ne(data::kIgnoreLabel), labels, masked) : masked;
  Outputs out;
  out.vectors = encoder->PoolWindows(encoder->Pool(encoder->Encode(clean), clean), views);
  if (language_model && labels.defined()) {
    AddLanguageModel(encoder->Encode(masked), labels, LabelledPositions({&views.lm_labels}, data::kIgnoreLabel, device),
                     &out);
  }
  return out;
}

torch::Tensor FlatPretrainingImpl::LanguageModelLoss(const torch::Tensor& lm_hidden, const torch::Tensor& lm_labels,
                                                     bool sum) {
  return DecoderCrossEntropy(lm_hidden, encoder->embeddings->tokens->weight, lm_bias_, lm_labels, sum);
}

}  // namespace docmatch::model
