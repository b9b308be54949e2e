// SMITH: Siamese Multi-depth Transformer-based Hierarchical encoder
// (Yang et al., CIKM 2020).
//
//   tokens (B, S, T) --pack real blocks--> (R, T)
//     -> embeddings + sentence transformer (L1 layers)     §3.2, eq. 1
//     -> [CLS] state -> dense + ReLU -> L2 norm = block vector (R, C)
//        (block_pooling mean: the mean of the block's token states -> L2
//        norm, a mean-pooled sentence encoder's own vector, e.g. MiniLM's)
//     -> scatter back to (B, S, C), + block position embedding,
//        LayerNorm + dropout (the official DocBertModel's embeddings)
//     -> document transformer (L2 layers)                   eq. 2
//     -> first output -> dense -> L2 norm = document-level vector (B, C)
//     -> combine (§4.1.4): normal keeps it; sum_concat / mean_concat /
//        attention put the pooled block vectors in front of it and scale the
//        concatenation to unit length = document vector (B, C or 2C);
//        residual (not in the paper): L2(mean of the block vectors +
//        dense(mean of the document states)), the dense layer starting at
//        zero, so that an imported sentence encoder starts as its windows
//        averaged and the document layers learn what they add (B, C)
//
// Only real blocks reach the sentence transformer (DESIGN.md performance
// rules): a batch whose documents have few blocks costs what its blocks cost.
// Pre-training adds the masked word LM (output layer tied to the token
// embedding) and masked sentence-block prediction (§4.2.2, eq. 4-6);
// fine-tuning scores pairs with one shared encoder (§4.3).
#pragma once

#include <torch/torch.h>

#include <string>

#include "data/batches/blocks.h"
#include "data/batches/step_buckets.h"
#include "model/transformer.h"

namespace docmatch::model {

struct ModelKind;

struct SmithConfig {
  int64_t vocab_size = 16000;   // V, from the corpus's tokenizer
  int64_t hidden = 256;         // C (paper: 256)
  int64_t heads = 4;            // A (paper: 4)
  int64_t intermediate = 1024;  // feed-forward width (4C)
  int64_t sentence_layers = 6;  // L1 (paper: 6)
  int64_t document_layers = 3;  // L2 (paper: 3)
  int64_t block_length = 32;    // T, [CLS] and [SEP] included (paper: 32)
  int64_t max_blocks = 48;      // S (paper: 48)
  // Each block reads [CLS] sentences [SEP], as the official code builds its
  // blocks and as BERT checkpoints (import-hf) were trained; false: no [SEP].
  bool separator = true;
  double dropout = 0.1;
  std::string combine = "normal";     // normal | sum_concat | mean_concat | attention | residual
  std::string block_pooling = "cls";  // cls ([CLS], dense, ReLU: the paper) | mean (token states averaged)
  double amplifier = 6.0;             // fine-tuning: logit = amplifier * cosine

  TransformerConfig Sentence() const { return {hidden, heads, intermediate, sentence_layers, dropout}; }
  TransformerConfig Document() const { return {hidden, heads, intermediate, document_layers, dropout}; }
  data::BlockOptions Blocks() const { return {block_length, max_blocks, separator}; }
};

// Where a block batch's real blocks, real tokens, predicted words and masked
// blocks sit, as flat indices on the batch's device. They are made on the
// host from the batch's host arrays: packing by a nonzero() of a device mask
// reads the mask back, and each such read is a host sync on a GPU (DESIGN.md
// performance rules), so the step's shapes are all known before it runs.
// A real block's position 0 (its [CLS]) counts as real even if a caller's
// block starts with padding, so that every real block has a row to pool.
struct BlockLayout {
  torch::Tensor real;       // (R,) int64 flat indices into B*S of the real blocks, ascending
  torch::Tensor tokens;     // (N,) int64 flat positions into R*T of the real blocks' real tokens, ascending
  torch::Tensor predicted;  // (M,) int64 rows of the N packed tokens that carry a word-LM label, ascending
  torch::Tensor masked;     // (P,) int64 flat indices into B*S of the masked blocks, document by document
  // A layout padded to a step bucket (ToTensors with a data::StepShape): the
  // real R, N, M and P, (4,) int64 on the device, and past them fillers:
  // blocks and masked blocks at B*S (one past the grid), filler tokens in the
  // filler blocks' rows (1 to T each), predicted rows at packed row 0.
  // Every output and loss leaves the fillers out. Undefined when the
  // layout holds real entries only.
  torch::Tensor counts;
};

// A BlockBatch as tensors on `device`, with its layout; with `shape`, its
// grid padded to shape's S x T and its layout to shape's R, N, M and P with
// fillers (data::BucketFor gives a shape that holds the batch), so that
// every batch of one bucket has the same tensor shapes.
struct BlockTensors {
  torch::Tensor tokens;      // (B, S, T) int64
  torch::Tensor block_mask;  // (B, S) bool, true = real block
  torch::Tensor lm_labels;   // (B, S, T) int64, data::kIgnoreLabel where not predicted
  BlockLayout layout;        // the masked blocks among it (layout.masked)
};
BlockTensors ToTensors(const data::BlockBatch& batch, const torch::Device& device,
                       const data::StepShape* shape = nullptr);

class SmithEncoderImpl : public torch::nn::Module {
 public:
  explicit SmithEncoderImpl(const SmithConfig& config);

  struct Blocks {
    torch::Tensor real;          // (R,) int64 flat indices into B*S of the real blocks
    PackedLayout tokens;         // the N real tokens of the (R, T) real blocks
    torch::Tensor token_states;  // (N, C) sentence-transformer outputs at the real tokens
    torch::Tensor vectors;       // (B, S, C) unit block vectors, zero at padding
  };
  // tokens (B, S, T) with the padding `layout` was made for
  Blocks EncodeBlocks(const torch::Tensor& tokens, const BlockLayout& layout);
  // vectors (B, S, C), block_mask (B, S) -> document-transformer states (B, S, C)
  torch::Tensor EncodeDocument(const torch::Tensor& vectors, const torch::Tensor& block_mask);
  // block vectors (B, S, C), document-transformer states (B, S, C),
  // block_mask (B, S) -> unit document vectors (B, dimension())
  torch::Tensor Combine(const torch::Tensor& block_vectors, const torch::Tensor& states,
                        const torch::Tensor& block_mask);
  // C for combine normal and residual, 2C for the concat modes
  int64_t dimension() const {
    return config_.combine == "normal" || config_.combine == "residual" ? config_.hidden : 2 * config_.hidden;
  }
  // batch (B documents) -> unit document vectors (B, dimension())
  torch::Tensor forward(const BlockTensors& batch);

  void set_kernel(AttentionKernel kernel);
  const SmithConfig& config() const { return config_; }

  Embeddings embeddings{nullptr};

 private:
  SmithConfig config_;
  TransformerEncoder sentence_encoder_{nullptr}, document_encoder_{nullptr};
  torch::nn::Linear block_dense_{nullptr}, document_dense_{nullptr}, attention_projection_{nullptr};
  torch::Tensor attention_context_;
  torch::nn::Embedding block_positions_{nullptr};
  torch::nn::LayerNorm document_embedding_norm_{nullptr};
};
TORCH_MODULE(SmithEncoder);

// The pre-training heads over a shared encoder: SMITH-WP uses the word LM,
// SMITH-WP+SP both.
class SmithPretrainingImpl : public torch::nn::Module {
 public:
  SmithPretrainingImpl(SmithEncoder encoder, const SmithConfig& config);

  struct Outputs {
    torch::Tensor lm_hidden;          // (M, C) LM-head states at the predicted token positions, before the decoder
    torch::Tensor lm_labels;          // (M,)
    torch::Tensor lm_valid;           // (M,) bool, false at a bucket's fillers; undefined without them
    torch::Tensor block_predictions;  // (P, C) document-transformer outputs at masked blocks, projected
    torch::Tensor block_originals;    // (P, C) the unit vectors those blocks had before masking
  };
  Outputs forward(const BlockTensors& batch, bool sentence_blocks);

  // Single process: LM loss + block loss with the batch's own originals as
  // the candidate pool. Returns (total, lm, block).
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> Loss(const BlockTensors& batch, bool sentence_blocks);

  // DocSplit on this encoder: `views` holds 2B documents, the first halves of
  // B documents then their second halves (data/batches/docsplit.h), with LM
  // masks or without. As in the paper (after SimCSE), the contrastive views
  // are clean: the vectors come from the views with every masked token
  // restored from its label; the word LM (`language_model`) runs on a
  // second, masked forward of the sentence encoder.
  struct ViewOutputs {
    torch::Tensor lm_hidden;  // (M, C); undefined without `language_model`
    torch::Tensor lm_labels;  // (M,)
    torch::Tensor lm_valid;   // (M,) bool, false at a bucket's fillers; undefined without them
    torch::Tensor vectors;    // (2B, dimension) unit document vectors of the clean views
  };
  ViewOutputs ForwardViews(const BlockTensors& views, bool language_model);
  // Single process: InfoNCE over the batch's own views + lm_weight * LM.
  // Returns (total, contrastive, lm).
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> DocSplit(const BlockTensors& views, double temperature = 0.05,
                                                                   double lm_weight = 0.1);

  // The word LM's loss from lm_hidden (M, C) and lm_labels (M,): the decoder
  // tied to the token embedding, with the fused cross-entropy (losses.h);
  // `valid` (M,) bool leaves rows out (a bucket's fillers).
  torch::Tensor LanguageModelLoss(const torch::Tensor& lm_hidden, const torch::Tensor& lm_labels, bool sum = false,
                                  const torch::Tensor& valid = {});
  // lm_hidden (M, C) -> the decoder's logits (M, V), for inspection and tests
  torch::Tensor LanguageModelLogits(const torch::Tensor& lm_hidden);

  SmithEncoder encoder{nullptr};

 private:
  // BERT's LM head over the packed token states where labels exist, up to
  // the decoder: returns (lm_hidden (M, C), lm_labels (M,), lm_valid (M,),
  // undefined without fillers).
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> LanguageModel(const SmithEncoderImpl::Blocks& blocks,
                                                                        const torch::Tensor& lm_labels,
                                                                        const BlockLayout& layout);

  torch::nn::Linear lm_transform_{nullptr}, block_dense_{nullptr};
  torch::nn::LayerNorm lm_norm_{nullptr}, block_norm_{nullptr};
  torch::Tensor lm_bias_, mask_vector_;
};
TORCH_MODULE(SmithPretraining);

// Model FLOPs of one SMITH pre-training step on `batch` (for throughput and
// model FLOPs utilisation), counting matrix products only, 2mnk each, and a
// backward pass as twice the forward (3x in all):
//   a transformer layer over n sequences of t positions, width C, feed-forward
//   width I: 8ntC^2 (Q, K, V and output projections) + 4ntCI (feed-forward)
//   + 4nt^2C (attention scores and context);
//   sentence level: L1 layers over each real block r at its l_r real tokens
//   (n = 1, t = l_r: the encoder computes real tokens only);
//   block vectors: 2RC^2; word LM head: 2MC(C + V) over the M predicted
//   tokens; with `document_level` (WP+SP, DocSplit): L2 layers over B
//   documents at S, and for P masked blocks 2PC^2 (projection) + 2PPC (scores
//   against the P originals).
// Elementwise work (LayerNorm, GELU, softmax, the optimizer) is left out, as
// model FLOPs utilisation conventionally does.
double SmithPretrainingFlops(const SmithConfig& config, const data::BlockBatch& batch, bool document_level);

// Whether a parameter (a name under any prefix) belongs to SMITH's lower
// level: the token embeddings and the sentence transformer.
bool SmithSentenceLevel(const std::string& name);

// SMITH-NP / WP / WP+SP fine-tuning and MatchBERT: one encoder for both
// documents of a pair.
torch::Tensor SiameseLoss(SmithEncoder& encoder, const BlockTensors& a, const BlockTensors& b,
                          const torch::Tensor& labels);

// Its row of the kind registry (model/kinds.h), in model/smith_kind.cpp with
// its DocumentModel.
const ModelKind& SmithKind();

}  // namespace docmatch::model
