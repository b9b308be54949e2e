// SMITH's forward, top to bottom as in the paper: packed sentence blocks, the
// document transformer, combine, and the pre-training heads (smith.h).
#include "model/smith.h"

#include <algorithm>
#include <limits>

#include "console/error.h"
#include "data/text/tokenizer.h"
#include "model/host_to_device.h"
#include "model/losses.h"

namespace docmatch::model {
namespace F = torch::nn::functional;

namespace {

torch::Tensor Normalize(const torch::Tensor& x) { return F::normalize(x, F::NormalizeFuncOptions().dim(-1)); }

// A bucket's fillers (smith.h, BlockLayout::counts) after the real entries:
// blocks at B*S, shape.N - N filler tokens spread over them (1 to T each,
// data::BucketFor leaves room), predicted rows at packed row 0, masked
// blocks at B*S. Appends the real counts to `counts`.
void AddFillers(const data::StepShape& shape, int64_t B, int64_t S, int64_t T, std::vector<int32_t>* real,
                std::vector<int32_t>* tokens, std::vector<int32_t>* predicted, std::vector<int32_t>* masked,
                std::vector<int32_t>* counts) {
  const auto size = [](const std::vector<int32_t>* v) { return static_cast<int64_t>(v->size()); };
  const int64_t R = size(real), N = size(tokens), M = size(predicted), P = size(masked);
  const int64_t blocks = shape.R - R, filler_tokens = shape.N - N;
  const bool room = blocks == 0 ? filler_tokens == 0 : blocks <= filler_tokens && filler_tokens <= blocks * T;
  DOCMATCH_CHECK(shape.R * shape.T <= std::numeric_limits<int32_t>::max(), "model", "a step bucket of ", shape.R,
                 " blocks of ", shape.T, " tokens is too large to index in int32");
  DOCMATCH_CHECK(room && blocks >= 0 && M <= shape.M && (M == shape.M || shape.N > 0) && P <= shape.P &&
                     T == shape.T && S == shape.S,
                 "model", "a batch of ", R, " blocks, ", N, " tokens, ", M, " predicted words and ", P,
                 " masked blocks does not fit the step bucket (", shape.R, ", ", shape.N, ", ", shape.M, ", ",
                 shape.P, ") of ", shape.S, " x ", shape.T, " (data::BucketFor makes one that does)");
  *counts = {static_cast<int32_t>(R), static_cast<int32_t>(N), static_cast<int32_t>(M), static_cast<int32_t>(P)};
  for (int64_t f = 0; f < blocks; ++f) {
    const int64_t r = R + f, length = filler_tokens / blocks + (f < filler_tokens % blocks ? 1 : 0);
    real->push_back(static_cast<int32_t>(B * S));
    for (int64_t t = 0; t < length; ++t) tokens->push_back(static_cast<int32_t>(r * T + t));
  }
  predicted->resize(shape.M, 0);
  masked->resize(shape.P, static_cast<int32_t>(B * S));
}

// The batch's layout (smith.h), read off its host arrays in one pass and
// sent in one copy, then cut into its parts on the device; with `shape`,
// padded to it with fillers.
BlockLayout LayoutOf(const data::BlockBatch& batch, const torch::Device& device, const data::StepShape* shape) {
  const int64_t B = batch.B, S = batch.S, T = batch.T, K = batch.K;
  DOCMATCH_CHECK(B * S * T <= std::numeric_limits<int32_t>::max(), "model", "a block batch of ", B, " x ", S, " x ", T,
                 " positions is too large to index in int32");
  std::vector<int32_t> real, tokens, predicted, masked, counts;  // int32: half an int64's bytes on the way
  for (int64_t block = 0; block < B * S; ++block) {
    if (!batch.block_mask[block]) continue;
    const int64_t r = static_cast<int64_t>(real.size());
    real.push_back(static_cast<int32_t>(block));
    for (int64_t t = 0; t < T; ++t) {
      const int64_t at = block * T + t;
      if (t != 0 && batch.tokens[at] == data::kPadId) continue;
      if (batch.lm_labels[at] != data::kIgnoreLabel) predicted.push_back(static_cast<int32_t>(tokens.size()));
      tokens.push_back(static_cast<int32_t>(r * T + t));
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t block = batch.masked_blocks[b * K + k];
      if (block >= 0) masked.push_back(static_cast<int32_t>(b * S + block));
    }
  }
  if (shape) AddFillers(*shape, B, S, T, &real, &tokens, &predicted, &masked, &counts);
  std::vector<int32_t> all;
  all.reserve(real.size() + tokens.size() + predicted.size() + masked.size() + counts.size());
  for (const auto* part : {&real, &tokens, &predicted, &masked, &counts}) {
    all.insert(all.end(), part->begin(), part->end());
  }
  const torch::Tensor on_device =
      HostToDevice(all.data(), {static_cast<int64_t>(all.size())}, torch::kInt32, device, torch::kLong);
  int64_t at = 0;
  const auto cut = [&](const std::vector<int32_t>& part) {
    const torch::Tensor piece = on_device.narrow(0, at, static_cast<int64_t>(part.size()));
    at += static_cast<int64_t>(part.size());
    return piece;
  };
  BlockLayout layout{cut(real), cut(tokens), cut(predicted), cut(masked)};  // a braced list runs left to right
  if (shape) layout.counts = cut(counts);
  return layout;
}

}  // namespace

BlockTensors ToTensors(const data::BlockBatch& given, const torch::Device& device, const data::StepShape* shape) {
  const data::BlockBatch padded = shape ? data::PadGrid(given, shape->S, shape->T) : data::BlockBatch();
  const data::BlockBatch& batch = shape ? padded : given;
  const int64_t B = batch.B, S = batch.S, T = batch.T;
  BlockTensors t;
  // Each is a copy, made before the batch's memory goes away.
  t.tokens = HostToDevice(batch.tokens.data(), {B, S, T}, torch::kInt32, device, torch::kLong);
  t.lm_labels = HostToDevice(batch.lm_labels.data(), {B, S, T}, torch::kInt32, device, torch::kLong);
  t.block_mask = HostToDevice(batch.block_mask.data(), {B, S}, torch::kUInt8, device, torch::kBool);
  t.layout = LayoutOf(batch, device, shape);
  return t;
}

bool SmithSentenceLevel(const std::string& name) {
  for (const char* level : {"embeddings.", "sentence_encoder."}) {
    const size_t at = name.find(level);
    if (at != std::string::npos && (at == 0 || name[at - 1] == '.')) return true;
  }
  return false;
}

SmithEncoderImpl::SmithEncoderImpl(const SmithConfig& config) : config_(config) {
  TORCH_CHECK(config.combine == "normal" || config.combine == "sum_concat" || config.combine == "mean_concat" ||
                  config.combine == "attention" || config.combine == "residual",
              "unknown SMITH combine mode '", config.combine,
              "' (normal, sum_concat, mean_concat, attention, residual)");
  TORCH_CHECK(config.block_pooling == "cls" || config.block_pooling == "mean", "unknown SMITH block_pooling '",
              config.block_pooling, "' (cls, mean)");
  const int64_t C = config.hidden;
  embeddings = register_module("embeddings", Embeddings(config.vocab_size, config.block_length, config.Sentence()));
  sentence_encoder_ = register_module("sentence_encoder", TransformerEncoder(config.Sentence()));
  // Only what the configuration uses is a parameter (no fresh layer that
  // nothing reads, which import-hf would list and checkpoints would carry).
  if (config.block_pooling == "cls") block_dense_ = register_module("block_dense", torch::nn::Linear(C, C));
  block_positions_ = register_module("block_positions", torch::nn::Embedding(config.max_blocks, C));
  document_encoder_ = register_module("document_encoder", TransformerEncoder(config.Document()));
  document_embedding_norm_ =
      register_module("document_embedding_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C}).eps(1e-12)));
  document_dense_ = register_module("document_dense", torch::nn::Linear(C, C));
  if (config.combine == "attention") {
    // The official code's attention pooling: a tanh projection of each block
    // vector, scored against a learned context vector (its attention size is
    // the hidden size in every released config).
    attention_projection_ = register_module("attention_projection", torch::nn::Linear(C, C));
    attention_context_ = register_parameter("attention_context", torch::zeros({C}));
  }
  InitializeBertStyle(*this);
  if (config.combine == "residual") {
    // At step 0 the document vector is the mean of the block vectors.
    torch::NoGradGuard no_grad;
    document_dense_->weight.zero_();
    document_dense_->bias.zero_();
  }
}

SmithEncoderImpl::Blocks SmithEncoderImpl::EncodeBlocks(const torch::Tensor& tokens, const BlockLayout& layout) {
  const int64_t B = tokens.size(0), S = tokens.size(1), T = tokens.size(2), C = config_.hidden;
  TORCH_CHECK(S <= config_.max_blocks && T <= config_.block_length, "batch of ", S, " blocks x ", T,
              " tokens exceeds the model's ", config_.max_blocks, " x ", config_.block_length);
  const int64_t R = layout.real.size(0);
  Blocks out;
  out.real = layout.real;  // (R,)
  // The sentence encoder runs on the real tokens only (transformer.h),
  // each real block's [CLS] among them (BlockLayout).
  out.tokens = PackedLayout::FromIndex(layout.tokens, R, T);
  // A bucket's filler blocks (at B*S) read the grid's last block: any ids will do.
  const torch::Tensor source = layout.counts.defined() ? out.real.clamp_max(B * S - 1) : out.real;
  const torch::Tensor ids =
      tokens.reshape({B * S, T}).index_select(0, source).reshape({-1}).index_select(0, out.tokens.index);  // (N,)
  const torch::Tensor positions = out.tokens.index.remainder(T);                                             // (N,)
  out.token_states = sentence_encoder_->ForwardPacked(embeddings->ForwardPacked(ids, positions), out.tokens);
  const torch::Tensor lengths = out.tokens.key_mask.sum(1);  // (R,)
  torch::Tensor vectors;                                     // (R, C)
  if (config_.block_pooling == "mean") {
    // Every real token of the block, [CLS] and [SEP] included, as
    // sentence-transformers' mean pooling counts them.
    const torch::Tensor block = out.tokens.index.div(T, "floor");  // (N,) the real block of each packed token
    const torch::Tensor sums = torch::zeros({R, C}, out.token_states.options()).index_add(0, block, out.token_states);
    vectors = Normalize(sums / lengths.unsqueeze(1).to(sums.dtype()));
  } else {
    // So block r's [CLS] is packed row (real tokens of blocks 0..r-1).
    const torch::Tensor cls = out.token_states.index_select(0, lengths.cumsum(0) - lengths);  // (R, C)
    vectors = Normalize(torch::relu(block_dense_(cls)));
  }
  if (layout.counts.defined()) {  // fillers land in a row past the grid, dropped
    out.vectors = torch::zeros({B * S + 1, C}, vectors.options())
                      .index_copy(0, out.real, vectors)
                      .narrow(0, 0, B * S)
                      .view({B, S, C});
  } else {
    out.vectors = torch::zeros({B * S, C}, vectors.options()).index_copy(0, out.real, vectors).view({B, S, C});
  }
  return out;
}

torch::Tensor SmithEncoderImpl::EncodeDocument(const torch::Tensor& vectors, const torch::Tensor& block_mask) {
  const torch::Tensor position = torch::arange(vectors.size(1), block_mask.options().dtype(torch::kLong));
  // As BERT's embeddings and the official DocBertModel: position added, then
  // LayerNorm and dropout. The unit block vectors enter at the scale the
  // layers expect; without the norm, a masked block's context reached its
  // prediction too faintly for the block task to start (smith_test.cpp,
  // MaskedBlockTaskIsLearnedWhereItIsLearnable).
  const torch::Tensor inputs = document_embedding_norm_(vectors + block_positions_(position).unsqueeze(0));
  return document_encoder_(F::dropout(inputs, F::DropoutFuncOptions().p(config_.dropout).training(is_training())),
                           block_mask);
}

torch::Tensor SmithEncoderImpl::Combine(const torch::Tensor& block_vectors, const torch::Tensor& states,
                                        const torch::Tensor& block_mask) {
  const torch::Tensor mask = block_mask.unsqueeze(-1).to(block_vectors.dtype());  // (B, S, 1)
  const torch::Tensor blocks = mask.sum(1).clamp_min(1.0);                        // (B, 1)
  if (config_.combine == "residual") {
    return Normalize((block_vectors * mask).sum(1) / blocks + document_dense_((states * mask).sum(1) / blocks));
  }
  const torch::Tensor document = Normalize(document_dense_(states.select(1, 0)));  // (B, C)
  if (config_.combine == "normal") return document;
  // §4.1.4: pool the sentence-block representations h_i (the unmasked block
  // vectors, not the document transformer's outputs) over the real blocks
  // and concatenate the pooled vector with the normalised document-level
  // representation, in the official code's order. The concatenation is
  // scaled to unit length: cosines, which every loss and search uses, are
  // the paper's.
  torch::Tensor pooled;  // (B, C)
  if (config_.combine == "sum_concat") {
    pooled = (block_vectors * mask).sum(1);
  } else if (config_.combine == "mean_concat") {
    pooled = (block_vectors * mask).sum(1) / blocks;
  } else {  // attention, over the real blocks only
    const torch::Tensor scores = (torch::tanh(attention_projection_(block_vectors)) * attention_context_)
                                     .sum(-1)
                                     .masked_fill(block_mask.logical_not(), -1e9);
    pooled = (torch::softmax(scores, 1).unsqueeze(-1) * block_vectors).sum(1);
    pooled = F::dropout(pooled, F::DropoutFuncOptions().p(config_.dropout).training(is_training()));
  }
  return Normalize(torch::cat({pooled, document}, 1));
}

torch::Tensor SmithEncoderImpl::forward(const BlockTensors& batch) {
  const Blocks blocks = EncodeBlocks(batch.tokens, batch.layout);
  return Combine(blocks.vectors, EncodeDocument(blocks.vectors, batch.block_mask), batch.block_mask);
}

void SmithEncoderImpl::set_kernel(AttentionKernel kernel) {
  sentence_encoder_->set_kernel(kernel);
  document_encoder_->set_kernel(kernel);
}

SmithPretrainingImpl::SmithPretrainingImpl(SmithEncoder shared, const SmithConfig& config) {
  const int64_t C = config.hidden;
  encoder = register_module("encoder", std::move(shared));
  lm_transform_ = register_module("lm_transform", torch::nn::Linear(C, C));
  lm_norm_ = register_module("lm_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C}).eps(1e-12)));
  lm_bias_ = register_parameter("lm_bias", torch::zeros({config.vocab_size}));
  mask_vector_ = register_parameter("block_mask_vector", torch::randn({C}) * 0.02);
  block_dense_ = register_module("block_dense", torch::nn::Linear(C, C));
  block_norm_ = register_module("block_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C}).eps(1e-12)));
  torch::NoGradGuard no_grad;
  for (auto* linear : {&lm_transform_, &block_dense_}) {
    (*linear)->weight.normal_(0.0, 0.02);
    (*linear)->bias.zero_();
  }
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> SmithPretrainingImpl::LanguageModel(
    const SmithEncoderImpl::Blocks& blocks, const torch::Tensor& lm_labels, const BlockLayout& layout) {
  // Word LM over the packed real blocks, only where a label exists (BERT's
  // head: dense + GELU + LayerNorm, decoder tied to the token embedding).
  // Labels sit on real tokens only (data::BuildBlockBatch), so the packed
  // states hold every predicted position.
  const int64_t T = lm_labels.size(2), grid = lm_labels.size(0) * lm_labels.size(1);
  const bool fillers = layout.counts.defined();
  torch::Tensor labels = lm_labels.reshape({-1, T})
                             .index_select(0, fillers ? blocks.real.clamp_max(grid - 1) : blocks.real)
                             .reshape({-1})
                             .index_select(0, blocks.tokens.index)
                             .index_select(0, layout.predicted);                       // (M,)
  const torch::Tensor states = blocks.token_states.index_select(0, layout.predicted);  // (M, C)
  torch::Tensor valid;
  if (fillers) {  // the rows past the real M
    valid = torch::arange(labels.size(0), labels.options()).lt(layout.counts[2]);
    labels = labels.masked_fill(valid.logical_not(), data::kIgnoreLabel);
  }
  return {lm_norm_(torch::gelu(lm_transform_(states))), labels, valid};
}

torch::Tensor SmithPretrainingImpl::LanguageModelLoss(const torch::Tensor& lm_hidden, const torch::Tensor& lm_labels,
                                                      bool sum, const torch::Tensor& valid) {
  return DecoderCrossEntropy(lm_hidden, encoder->embeddings->tokens->weight, lm_bias_, lm_labels, sum, valid);
}

torch::Tensor SmithPretrainingImpl::LanguageModelLogits(const torch::Tensor& lm_hidden) {
  return torch::addmm(lm_bias_, lm_hidden, encoder->embeddings->tokens->weight.t());
}

SmithPretrainingImpl::Outputs SmithPretrainingImpl::forward(const BlockTensors& batch, bool sentence_blocks) {
  const int64_t B = batch.tokens.size(0), S = batch.tokens.size(1);
  SmithEncoderImpl::Blocks blocks = encoder->EncodeBlocks(batch.tokens, batch.layout);
  Outputs out;

  std::tie(out.lm_hidden, out.lm_labels, out.lm_valid) = LanguageModel(blocks, batch.lm_labels, batch.layout);

  if (sentence_blocks) {
    // Masked sentence-block prediction (§4.2.2): swap the chosen blocks'
    // vectors for the learned mask vector, run the document transformer,
    // project its outputs there with the official code's head (dense + GELU
    // + LayerNorm, as BERT's word LM transform).
    // A bucket's filler masked blocks sit at B*S: they mask a row past the
    // grid and read the grid's last block, and the loss leaves them out.
    const bool fillers = batch.layout.counts.defined();
    const torch::Tensor& flat = batch.layout.masked;                              // (P,)
    const torch::Tensor source = fillers ? flat.clamp_max(B * S - 1) : flat;      // (P,)
    const torch::Tensor originals = blocks.vectors.reshape({B * S, -1}).index_select(0, source);  // (P, C)
    const torch::Tensor is_masked = torch::zeros({B * S + (fillers ? 1 : 0)}, batch.block_mask.options())
                                        .index_fill(0, flat, true)
                                        .narrow(0, 0, B * S);
    const torch::Tensor inputs =
        torch::where(is_masked.view({B, S, 1}), mask_vector_.view({1, 1, -1}), blocks.vectors);  // (B, S, C)
    const torch::Tensor doc_states = encoder->EncodeDocument(inputs, batch.block_mask);
    out.block_predictions =
        block_norm_(torch::gelu(block_dense_(doc_states.reshape({B * S, -1}).index_select(0, source))));
    out.block_originals = originals;
  }
  return out;
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> SmithPretrainingImpl::Loss(const BlockTensors& batch,
                                                                                   bool sentence_blocks) {
  const Outputs out = forward(batch, sentence_blocks);
  const torch::Tensor lm = LanguageModelLoss(out.lm_hidden, out.lm_labels, /*sum=*/false, out.lm_valid);
  if (!sentence_blocks) return {lm, lm, torch::zeros_like(lm)};
  torch::Tensor positive = torch::arange(out.block_predictions.size(0), batch.tokens.options());
  torch::Tensor real;  // a bucket's filler masked blocks: neither queries nor candidates
  if (batch.layout.counts.defined()) {
    real = positive.lt(batch.layout.counts[3]);
    positive = positive.masked_fill(real.logical_not(), data::kIgnoreLabel);
  }
  const torch::Tensor block =
      SentenceBlockLoss(out.block_predictions, out.block_originals, positive, /*sum=*/false, nullptr, real);
  return {lm + block, lm, block};
}

SmithPretrainingImpl::ViewOutputs SmithPretrainingImpl::ForwardViews(const BlockTensors& views, bool language_model) {
  // Every predicted position's label is its original token (BERT's rule).
  const torch::Tensor labelled = views.lm_labels.ne(data::kIgnoreLabel);
  const torch::Tensor clean = torch::where(labelled, views.lm_labels, views.tokens);
  const SmithEncoderImpl::Blocks blocks = encoder->EncodeBlocks(clean, views.layout);  // padded where views.tokens is
  ViewOutputs out;
  out.vectors =
      encoder->Combine(blocks.vectors, encoder->EncodeDocument(blocks.vectors, views.block_mask), views.block_mask);
  if (language_model) {
    std::tie(out.lm_hidden, out.lm_labels, out.lm_valid) =
        LanguageModel(encoder->EncodeBlocks(views.tokens, views.layout), views.lm_labels, views.layout);
  }
  return out;
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> SmithPretrainingImpl::DocSplit(const BlockTensors& views,
                                                                                       double temperature,
                                                                                       double lm_weight) {
  const ViewOutputs out = ForwardViews(views, lm_weight != 0);
  const int64_t V = out.vectors.size(0), B = V / 2;
  TORCH_CHECK(V == 2 * B, "DocSplit needs both halves of every document, got ", V, " views");
  const torch::Tensor self = torch::arange(V, views.tokens.options());
  const torch::Tensor contrastive = DocSplitLoss(out.vectors, out.vectors, self, (self + B) % V, temperature);
  if (lm_weight == 0) return {contrastive, contrastive, torch::zeros_like(contrastive)};
  const torch::Tensor lm = LanguageModelLoss(out.lm_hidden, out.lm_labels, /*sum=*/false, out.lm_valid);
  return {contrastive + lm_weight * lm, contrastive, lm};
}

torch::Tensor SiameseLoss(SmithEncoder& encoder, const BlockTensors& a, const BlockTensors& b,
                          const torch::Tensor& labels) {
  return SiameseCosineLoss(encoder->forward(a), encoder->forward(b), labels, encoder->config().amplifier);
}

double SmithPretrainingFlops(const SmithConfig& c, const data::BlockBatch& batch, bool document_level) {
  const double C = static_cast<double>(c.hidden), I = static_cast<double>(c.intermediate);
  const double V = static_cast<double>(c.vocab_size);
  auto layers = [&](double n, double t, int64_t count) {
    return static_cast<double>(count) * (8 * n * t * C * C + 4 * n * t * C * I + 4 * n * t * t * C);
  };
  double real_blocks = 0, predicted = 0, masked_blocks = 0, forward = 0;
  for (size_t block = 0; block < batch.block_mask.size(); ++block) {
    if (!batch.block_mask[block]) continue;
    real_blocks += 1;
    const auto first = batch.tokens.begin() + static_cast<int64_t>(block) * batch.T;
    const double length =
        static_cast<double>(std::count_if(first, first + batch.T, [](int32_t t) { return t != data::kPadId; }));
    forward += layers(1, length, c.sentence_layers);
  }
  for (int32_t label : batch.lm_labels) predicted += label != data::kIgnoreLabel;
  for (int64_t block : batch.masked_blocks) masked_blocks += block >= 0;
  forward += 2 * real_blocks * C * C + 2 * predicted * C * (C + V);
  if (document_level) {
    forward += layers(static_cast<double>(batch.B), static_cast<double>(batch.S), c.document_layers) +
               2 * masked_blocks * C * C + 2 * masked_blocks * masked_blocks * C;
  }
  return 3 * forward;
}

}  // namespace docmatch::model
