// Every document encoder behind one interface, for the stages after
// pre-training: fine-tuning, embedding, evaluation and export see documents
// in, vectors and pair logits out, whatever the kind.
//
//   kind        module        vectors                         pair logit
//   smith       SmithEncoder  unit document vector (§3.2)     amplifier * cos
//   match_bert  FlatEncoder   unit [CLS] vector               amplifier * cos
//   smash       SmashPair     concatenated depths             the pair head
//   sdr         SentenceEnc.  mean of unit sentence vectors   cos
//   bag         BagEncoder    unit mean of token embeddings   amplifier * cos
//
// Each kind's DocumentModel sits in its own file next to its module, with its
// row of the kind registry (model/kinds.h), which Create reads.
//
// SDR's own document score is the hierarchical one over sentence vectors
// (eval/sdr_scoring.h); EmbedSentences gives them. Its mean vector is only a
// cheap stand-in where one vector per document is needed.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "console/error.h"
#include "data/corpus/document.h"
#include "model/config.h"
#include "model/kinds.h"

namespace docmatch::model {

// A document's sentence vectors and where its paragraphs start.
struct DocumentSentences {
  torch::Tensor vectors;                   // (S, C) unit sentence vectors
  std::vector<int64_t> paragraph_offsets;  // (P + 1,) into the sentences
};

// SDR's one vector per document: the normalised mean of its sentence vectors.
torch::Tensor MeanSentenceVector(const DocumentSentences& document);

class DocumentModel {
 public:
  // A freshly initialised model of `config.kind` (seeded by the caller): its
  // row's factory.
  static std::unique_ptr<DocumentModel> Create(const ModelConfig& config);
  virtual ~DocumentModel() = default;

  const ModelConfig& config() const { return config_; }
  // The parameters fine-tuned, saved and exported (names as in checkpoints).
  virtual torch::nn::Module& module() = 0;
  // The size of a document vector.
  virtual int64_t dimension() const = 0;
  // Embed's host half: the documents' batch (tokens, masks, offsets), built
  // from the documents alone, without the parameters or a device, so any
  // thread may build it (finetune's loader builds the next step's while the
  // device runs this one, and gradient caching's re-run uses it again).
  class HostBatch {
   public:
    virtual ~HostBatch() = default;
  };
  virtual std::shared_ptr<const HostBatch> Batch(const std::vector<const data::Document*>& documents) const = 0;
  // Embed's device half: vectors (B, dimension()) of a batch from Batch(), on `device`.
  virtual torch::Tensor EmbedBatch(const HostBatch& batch, const torch::Device& device) = 0;
  // Vectors (B, dimension()) of these documents, unmasked, on `device`: both halves.
  torch::Tensor Embed(const std::vector<const data::Document*>& documents, const torch::Device& device) {
    return EmbedBatch(*Batch(documents), device);
  }
  // Logits (B,) that pairs (a[i], b[i]) are related; a, b (B, dimension()),
  // on a's device wherever the parameters are.
  virtual torch::Tensor PairLogits(const torch::Tensor& a, const torch::Tensor& b) = 0;
  // Logits (Q, N) of every query (Q, D) against every candidate (N, D);
  // entry (i, j) equals PairLogits(queries[i], candidates[j]); on the
  // queries' device wherever the parameters are.
  virtual torch::Tensor ScoreMatrix(const torch::Tensor& queries, const torch::Tensor& candidates) = 0;
  // How many of `document`'s tokens its vector reads: all of them unless the
  // model's input cuts it (MatchBERT's windows, SMITH's blocks, SDR's and
  // SMASH's per-sentence and per-paragraph limits). `embed` reports the
  // documents read in part.
  virtual int64_t TokensRead(const data::Document& document) const = 0;
  // Whether pair logits are a monotone function of the vectors' cosine (then
  // ranking needs only the vectors).
  virtual bool cosine() const { return true; }
  // Step buckets (finetune --step-buckets): with them on, EmbedBatch pads
  // each batch to its step bucket (data/batches/step_buckets.h), a few fixed
  // tensor shapes, what a CUDA-graph step needs; the vectors are the
  // unpadded batch's (dropout aside: it draws over the padded grid), the
  // padding costs time. Kinds that cannot pad say so
  // (takes_step_buckets false) and are refused the flag.
  virtual bool takes_step_buckets() const { return false; }
  void set_step_buckets(bool on) { step_buckets_ = on; }
  bool step_buckets() const { return step_buckets_; }
  // A batch padded to its step bucket as device tensors (a captured step's
  // static inputs, train/captured_step.h): batches with equal keys have
  // tensors of equal shapes, in the same order (undefined ones alike), so
  // one's can be copied into another's. EmbedPadded gives their vectors,
  // EmbedBatch's with step buckets on. For kinds that take step buckets.
  struct PaddedBatch {
    std::vector<torch::Tensor> tensors;
    std::vector<int64_t> key;
  };
  virtual PaddedBatch Pad(const HostBatch& batch, const torch::Device& device) const;
  virtual torch::Tensor EmbedPadded(const PaddedBatch& batch);
  // SDR only: each document's sentence vectors with its paragraph structure.
  virtual bool has_sentences() const { return false; }
  virtual std::vector<DocumentSentences> EmbedSentences(const std::vector<const data::Document*>& documents,
                                                        const torch::Device& device);

 protected:
  explicit DocumentModel(ModelConfig config) : config_(std::move(config)) {}

 private:
  ModelConfig config_;
  bool step_buckets_ = false;
};

// For the kinds' DocumentModels: a kind's host batch holds what its builder
// gives (a data::BlockBatch, ...), and BatchOf reads it back, refusing a
// batch another kind built.
template <typename T>
struct HeldBatch : DocumentModel::HostBatch {
  explicit HeldBatch(T v) : value(std::move(v)) {}
  T value;
};
template <typename T>
const T& BatchOf(const DocumentModel::HostBatch& batch) {
  const auto* held = dynamic_cast<const HeldBatch<T>*>(&batch);
  DOCMATCH_CHECK(held != nullptr, "model", "a batch built by another kind of model");
  return held->value;
}

// The pair logit of kinds whose vectors are compared by cosine: amplifier *
// cos(a[i], b[i]) (B,) for a, b (B, D), and every query against every
// candidate, (Q, N) for q (Q, D) and c (N, D).
torch::Tensor CosineLogits(const torch::Tensor& a, const torch::Tensor& b, double amplifier);
torch::Tensor CosineMatrix(const torch::Tensor& q, const torch::Tensor& c, double amplifier);

}  // namespace docmatch::model
