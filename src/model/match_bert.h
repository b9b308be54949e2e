// MatchBERT, SMITH's flat baseline (Yang et al. 2020, §5.2): one transformer
// over the first N tokens; the [CLS] output -> dense -> L2 norm is the
// document vector, trained with the same Siamese loss (losses.h).
//
// For encoders imported from sentence-transformers (import-hf) the vector
// can instead be the mean of the real tokens' outputs, L2-normalised
// (pooling: mean, no dense layer), and a long document can be read as up to
// `chunks` windows whose unit vectors are pooled (window_pooling) and
// normalised again: mean (averaged), max (their elementwise maximum), or
// attention (a learned layer weighs them: softmax over the document's
// windows of context . tanh(W v), the context starting at zero, so that it
// starts as the mean and learns which windows count). With maxsim the
// windows' vectors are kept: two documents score by late interaction
// (ColBERT's MaxSim, Khattab & Zaharia 2020, over windows instead of tokens):
// each window of the query meets its most similar window of the candidate,
// and the cosines are averaged over the query's windows (eval/sdr_scoring.h
// with one paragraph a document). Where one vector is needed (fine-tuning's
// loss, fuse's vectors, search's first pass) it is the windows' mean.
#pragma once

#include <torch/torch.h>

#include <string>

#include "data/batches/flat_batch.h"
#include "model/transformer.h"

namespace docmatch::model {

struct ModelKind;

struct MatchBertConfig {
  int64_t vocab_size = 16000;   // V
  int64_t hidden = 256;         // C
  int64_t heads = 4;            // H
  int64_t intermediate = 1024;  // feed-forward width
  int64_t layers = 6;           // L
  int64_t max_tokens = 256;     // N, [CLS] included (paper: 256)
  double dropout = 0.1;
  double amplifier = 6.0;
  std::string pooling = "cls";          // cls: [CLS] -> dense; mean: mean of real tokens
  bool separator = false;               // end each window with [SEP]
  int64_t chunks = 1;                   // windows of max_tokens per document
  std::string window_pooling = "mean";  // mean | max | attention | maxsim: the windows' unit vectors -> one

  data::FlatOptions Flat() const { return {max_tokens, separator, chunks}; }
  TransformerConfig Transformer() const { return {hidden, heads, intermediate, layers, dropout}; }
};

// tokens (B, T) int64 on `device`.
torch::Tensor ToTensor(const data::FlatBatch& batch, const torch::Device& device);

// Unit window vectors `rows` (B, C), row b of document owner[b] (B,) int64,
// pooled per document into unit vectors (documents, C): their elementwise
// max for "max", else their mean ("mean", and maxsim's one vector). What a
// model's window_pooling computes, and what choose (eval/choose.h) reads its
// windows with.
torch::Tensor PoolRowsByDocument(const torch::Tensor& rows, const torch::Tensor& owner, int64_t documents,
                                 const std::string& pooling);

class FlatEncoderImpl : public torch::nn::Module {
 public:
  explicit FlatEncoderImpl(const MatchBertConfig& config);
  // tokens (B, T) -> unit row vectors (B, C)
  torch::Tensor forward(const torch::Tensor& tokens);
  // A batch -> unit document vectors (batch.documents, C), windows of a document averaged.
  torch::Tensor Documents(const data::FlatBatch& batch, const torch::Device& device);
  // tokens (B, T) -> token states (B, T, C)
  torch::Tensor Encode(const torch::Tensor& tokens);
  // Token states (B, T, C) of `tokens` -> unit row vectors (B, C): the pooling.
  torch::Tensor Pool(const torch::Tensor& states, const torch::Tensor& tokens);
  // Unit row vectors (B, C) of a batch, without a graph: at most
  // kRowsPerPass windows through the transformer at a time, so a document of
  // hundreds of windows embeds in bounded memory (EncodeRowsWithoutGraph).
  torch::Tensor RowsWithoutGraph(const data::FlatBatch& batch, const torch::Device& device);
  static constexpr int64_t kRowsPerPass = 64;
  // Unit row vectors (B, C) of a batch -> unit document vectors
  // (batch.documents, C): the windows of each document pooled (maxsim: their
  // mean).
  torch::Tensor PoolWindows(const torch::Tensor& rows, const data::FlatBatch& batch);
  void set_kernel(AttentionKernel kernel) { encoder_->set_kernel(kernel); }
  const MatchBertConfig& config() const { return config_; }

  Embeddings embeddings{nullptr};

 private:
  MatchBertConfig config_;
  TransformerEncoder encoder_{nullptr};
  torch::nn::Linear dense_{nullptr};
  torch::nn::Linear window_projection_{nullptr};  // window_pooling attention
  torch::Tensor window_context_;
};
TORCH_MODULE(FlatEncoder);

// Self-supervised training of a flat encoder (pretrain on kind match_bert):
// BERT's masked word LM head over the token states (dense + GELU + LayerNorm,
// decoder tied to the token embedding, as SMITH's) and the document vectors
// of the same pass, for DocSplit's contrastive halves.
class FlatPretrainingImpl : public torch::nn::Module {
 public:
  FlatPretrainingImpl(FlatEncoder encoder, const MatchBertConfig& config);

  struct Outputs {
    torch::Tensor lm_hidden;  // (M, C) LM-head states at the predicted positions, before the decoder
    torch::Tensor lm_labels;  // (M,)
    torch::Tensor vectors;    // (batch.documents, C) unit document vectors
  };
  // A batch with LM labels (data::BuildFlatBatch with masks), or without
  // (then no LM outputs).
  Outputs forward(const data::FlatBatch& batch, const torch::Device& device);
  // DocSplit's views (data::BuildFlatDocSplitBatch): vectors from the clean
  // views, every masked token restored from its label (the paper, after
  // SimCSE); the word LM, with `language_model`, from a second, masked pass.
  Outputs ForwardViews(const data::FlatBatch& views, const torch::Device& device, bool language_model);
  // The word LM's cross-entropy (fused, losses.h), mean or sum over M.
  torch::Tensor LanguageModelLoss(const torch::Tensor& lm_hidden, const torch::Tensor& lm_labels, bool sum = false);

  FlatEncoder encoder{nullptr};

 private:
  // The LM head's states and labels where `labels` (B, T) predicts.
  // predicted: (M,) int64 flat positions of `labels` (B, T) that carry a label, found on the host
  void AddLanguageModel(const torch::Tensor& states, const torch::Tensor& labels, const torch::Tensor& predicted,
                        Outputs* out);

  torch::nn::Linear lm_transform_{nullptr};
  torch::nn::LayerNorm lm_norm_{nullptr};
  torch::Tensor lm_bias_;
};
TORCH_MODULE(FlatPretraining);

// Its row of the kind registry (model/kinds.h), in model/match_bert_kind.cpp with
// its DocumentModel.
const ModelKind& MatchBertKind();

}  // namespace docmatch::model
