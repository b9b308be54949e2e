// SDR: Self-supervised Document Representation (Ginzburg et al., 2021).
// A sentence encoder (transformer, mean-pooled token outputs) trained with a
// masked word LM plus a cosine contrastive loss on sentence pairs (§3);
// documents are compared at inference by the two-stage hierarchical score in
// eval/sdr_scoring.h, over the sentence vectors this encoder gives.
#pragma once

#include <torch/torch.h>

#include "data/batches/sdr_batch.h"
#include "model/transformer.h"

namespace docmatch::model {

struct ModelKind;

struct SdrConfig {
  int64_t vocab_size = 16000;   // V
  int64_t hidden = 256;         // C
  int64_t heads = 4;            // H
  int64_t intermediate = 1024;  // feed-forward width
  int64_t layers = 6;           // L
  int64_t max_tokens = 64;      // tokens per sentence
  double dropout = 0.1;
  double margin = 1.0;     // negatives pushed below cosine 1 - margin (paper: 0)
  bool separator = false;  // read each sentence as [CLS] ... [SEP], as BERT does (imports set it)

  TransformerConfig Transformer() const { return {hidden, heads, intermediate, layers, dropout}; }
};

struct SdrTensors {
  torch::Tensor anchors, anchor_labels;    // (B, T) int64
  torch::Tensor partners, partner_labels;  // (B, T) int64
  torch::Tensor pair;                      // (B,) int64
  torch::Tensor label;                     // (B,) float
  torch::Tensor predicted;                 // (M,) int64 flat positions in the (2B, T) anchors then partners
                                           // that carry an LM label, found on the host
};
SdrTensors ToTensors(const data::SdrBatch& batch, const torch::Device& device);

class SentenceEncoderImpl : public torch::nn::Module {
 public:
  explicit SentenceEncoderImpl(const SdrConfig& config);
  // tokens (B, T) -> token states (B, T, C)
  torch::Tensor Encode(const torch::Tensor& tokens);
  // tokens (B, T) -> sentence vectors (B, C): mean over real tokens
  torch::Tensor forward(const torch::Tensor& tokens);
  // token states (M, C) at masked positions -> logits (M, V), tied decoder
  torch::Tensor LanguageModel(const torch::Tensor& states);

  // Anchors and partners in one pass.
  struct PairOutputs {
    torch::Tensor anchors;    // (B, C) sentence vectors
    torch::Tensor partners;   // (B, C)
    torch::Tensor lm_logits;  // (M, V) at the masked tokens of both sides
    torch::Tensor lm_labels;  // (M,)
  };
  PairOutputs ForwardPairs(const SdrTensors& batch);

  // Single process: (total, contrastive, lm) with the batch's own partners as
  // candidates.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> Loss(const SdrTensors& batch);

  const SdrConfig& config() const { return config_; }
  Embeddings embeddings{nullptr};

 private:
  SdrConfig config_;
  TransformerEncoder encoder_{nullptr};
  torch::nn::Linear lm_transform_{nullptr};
  torch::nn::LayerNorm lm_norm_{nullptr};
  torch::Tensor lm_bias_;
};
TORCH_MODULE(SentenceEncoder);

// Its row of the kind registry (model/kinds.h), in model/sdr_kind.cpp with
// its DocumentModel.
const ModelKind& SdrKind();

}  // namespace docmatch::model
