// SMASH RNN (Jiang et al., WWW 2019, §3) and HAN (Yang et al., NAACL 2016).
//
// Each depth is its own attention-based hierarchical RNN: at every level a
// bidirectional GRU followed by attention pooling (u = tanh(W h + b),
// a = softmax(u . context) over real positions):
//   P depth: words -> sentence -> paragraph -> document (the paragraph grid)
//   S depth: words -> sentence -> document (the document's own sentences)
//   W depth: words -> document (the document's first words)
// The depths share only the word embeddings; every GRU and attention belongs
// to one depth (the paper's three RNNs of different depths). The document
// vector concatenates the chosen depths ("P", "P+S", "P+S+W"); HAN is the S
// depth alone. Padding never reaches a GRU (packed sequences of real units
// only) and is masked in every attention. Pairs: concat -> FC + ReLU -> FC ->
// sigmoid, trained with binary cross-entropy.
#pragma once

#include <torch/torch.h>

#include <string>

#include "data/batches/hierarchy_batch.h"

namespace docmatch::model {

struct ModelKind;

struct SmashConfig {
  int64_t vocab_size = 16000;    // V
  int64_t embedding = 256;       // word embedding size (paper: 256)
  int64_t gru_units = 128;       // per direction (paper: 128); each depth outputs 2x this
  std::string depths = "P+S+W";  // any of P, S, W joined by '+'; HAN = "S"
  int64_t pair_hidden = 128;     // the pair head's hidden layer (paper: 128)
  double dropout = 0.1;          // on word embeddings and the pair head
  data::HierarchyOptions input;  // truncation of each depth's view (model keys max_paragraphs, ...)
};

// The non-empty rows of one level and their lengths. The lengths stay on the
// host, where packing reads them (pack_padded_sequence), and both are
// counted there from the batch's arrays: a count of a device tensor would
// have to come back to the host, a sync on a GPU (DESIGN.md).
struct SequenceRows {
  torch::Tensor rows;     // (R,) int64 on the device: the non-empty rows, ascending
  torch::Tensor lengths;  // (R,) int64 on the host: the real units in each
};

struct HierarchyTensors {
  torch::Tensor tokens;               // (B, P, S, W) int64: the paragraph grid
  torch::Tensor sentences;            // (B, D, L) int64: the document's sentences in order
  torch::Tensor words;                // (B, N) int64
  SequenceRows grid_sentences;        // of the B*P*S grid sentences: words in each
  SequenceRows paragraphs;            // of the B*P paragraphs: sentences in each
  SequenceRows view_sentences;        // of the B*D sentence-view rows: words in each
  torch::Tensor document_paragraphs;  // (B,) int64 on the host
  torch::Tensor document_sentences;   // (B,) int64 on the host: rows of the sentence view
  torch::Tensor document_words;       // (B,) int64 on the host
};
HierarchyTensors ToTensors(const data::HierarchyBatch& batch, const torch::Device& device);

// Attention pooling over real positions: x (N, L, C), mask (N, L) -> (N, C).
class AttentionPoolingImpl : public torch::nn::Module {
 public:
  explicit AttentionPoolingImpl(int64_t channels);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);

 private:
  torch::nn::Linear project_{nullptr};
  torch::Tensor context_;  // (C,)
};
TORCH_MODULE(AttentionPooling);

// One depth level: BiGRU over the real prefix of each sequence, then
// attention pooling. x (N, L, C_in), lengths (N,) >= 1 int64 on the host
// -> (N, 2 * units).
class GruAttentionImpl : public torch::nn::Module {
 public:
  GruAttentionImpl(int64_t input, int64_t units);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& lengths);

 private:
  torch::nn::GRU gru_{nullptr};
  AttentionPooling pooling_{nullptr};
};
TORCH_MODULE(GruAttention);

class SmashEncoderImpl : public torch::nn::Module {
 public:
  explicit SmashEncoderImpl(const SmashConfig& config);
  // -> document vectors (B, output_size())
  torch::Tensor forward(const HierarchyTensors& batch);
  int64_t output_size() const;

 private:
  SmashConfig config_;
  bool paragraph_depth_ = false, sentence_depth_ = false, word_depth_ = false;
  // Runs `words_to_sentence` over the `real` rows of (R, L) token rows ->
  // (R, C) sentence vectors, zero for all-padding rows.
  torch::Tensor EncodeSentences(GruAttention& words_to_sentence, const torch::Tensor& rows, const SequenceRows& real);

  torch::nn::Embedding embedding_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
  // p_: the paragraph depth's levels, s_: the sentence depth's, w_: the word depth's.
  GruAttention p_word_to_sentence_{nullptr}, p_sentence_to_paragraph_{nullptr}, p_paragraph_to_document_{nullptr},
      s_word_to_sentence_{nullptr}, s_sentence_to_document_{nullptr}, w_word_to_document_{nullptr};
};
TORCH_MODULE(SmashEncoder);

// The Siamese pair model: one encoder for both documents, then the head.
class SmashPairImpl : public torch::nn::Module {
 public:
  explicit SmashPairImpl(const SmashConfig& config);
  // -> logits (B,) that the pair is related
  torch::Tensor forward(const HierarchyTensors& a, const HierarchyTensors& b);
  // Binary cross-entropy of forward(a, b) against labels (B,) in {0, 1}.
  torch::Tensor Loss(const HierarchyTensors& a, const HierarchyTensors& b, const torch::Tensor& labels);
  // The head alone, on document vectors a, b (B, D) -> logits (B,).
  torch::Tensor Head(const torch::Tensor& a, const torch::Tensor& b);
  // The head (evaluation mode) on every query (Q, D) against every candidate
  // (N, D) -> (Q, N), without forming Q*N concatenations: the first layer
  // splits as W_q q + W_c c, so only the hidden layer is paid per pair.
  torch::Tensor ScoreMatrix(const torch::Tensor& queries, const torch::Tensor& candidates);

  SmashEncoder encoder{nullptr};

 private:
  torch::nn::Sequential head_{nullptr};
};
TORCH_MODULE(SmashPair);

// Its row of the kind registry (model/kinds.h), in model/smash_kind.cpp with
// its DocumentModel.
const ModelKind& SmashKind();

}  // namespace docmatch::model
