// `docmatch embed` and the file it writes: every document's vector (and, for
// SDR, its sentence vectors with their paragraph structure; for MatchBERT
// with window_pooling maxsim, its window vectors as one paragraph), keyed by
// id.
//
//   document_ids       strings (N,), corpus order
//   vectors            float32 (N, D)
//   SDR and maxsim only:
//   sentence_vectors   float32 (sentences, D) unit vectors (maxsim: windows)
//   paragraph_offsets  int64 (paragraphs + 1,) into sentence_vectors
//   document_offsets   int64 (N + 1,) into paragraphs
//
// How two documents of a file score (EmbeddingFile::score): SDR's
// hierarchical score where the kind is sdr; late interaction (MaxSim: each
// query window's best cosine among the candidate's windows, averaged over
// the query's windows; sdr_scoring.h with one paragraph and no z-score)
// where another kind (match_bert maxsim, or a fused file made from one)
// holds sentence vectors; else the cosine of the vectors (SMASH: its pair
// head).
//   attributes: docmatch_format = "docmatch-embeddings", format_version,
//               kind, dimension, model (the folder), corpus (the folder
//               embedded; `encode` writes none), tokenizer_hash; model and
//               corpus as absolute paths with links resolved, so that the
//               file is read the same from any working directory and names
//               the checkpoint itself, not a run's `latest`
//
// Each rank embeds a contiguous share of the corpus into <output>.part-<r>;
// rank 0 then joins the parts in order, copying a block of rows at a time,
// into <output> (written under a temporary name, renamed when complete).
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/corpus/corpus.h"
#include "dist/process_group.h"
#include "files/lock_file.h"
#include "model/document_model.h"

namespace docmatch::data::shard_format {
class Handle;
}

namespace docmatch::eval {

struct EmbedOptions {
  std::string model;   // model folder
  std::string corpus;  // prepared corpus folder
  std::string output;  // the .h5 file
  int64_t batch_size = 16;
  bool progress = true;
};

// Vectors (B, D) float32 on the CPU of `documents`, as embed writes them:
// the model's, or for SDR the mean of each document's sentence vectors,
// which `sentences` (when given) receives, on the CPU. No graph.
torch::Tensor DocumentVectors(model::DocumentModel& model, const std::vector<const data::Document*>& documents,
                              const torch::Device& device, std::vector<model::DocumentSentences>* sentences = nullptr);

// Writes a new embeddings file (or one rank's part of one) a batch of
// documents at a time; the file is complete when WriteAttributes has run and
// Close has returned. A writer destroyed before that (an exception, a full
// disk) removes its file: nothing half-written stays behind.
class EmbeddingWriter {
 public:
  EmbeddingWriter(std::string path, int64_t dimension, bool sentences);
  ~EmbeddingWriter();
  // Embeds `documents` with `model` (sentence vectors too when the file holds
  // them) and appends them.
  void Append(model::DocumentModel& model, const std::vector<const data::Document*>& documents,
              const torch::Device& device);
  // Appends rows that are vectors already (`docmatch fuse`): a file without
  // sentence vectors only.
  void AppendVectors(const std::vector<std::string>& ids, const torch::Tensor& vectors);
  // The same with each document's sentence vectors (CPU float32), for a file
  // that holds them.
  void AppendDocuments(const std::vector<std::string>& ids, const torch::Tensor& vectors,
                       const std::vector<model::DocumentSentences>& sentences);
  // The format attributes plus `attributes` (kind, model, corpus, tokenizer_hash).
  void WriteAttributes(const std::map<std::string, std::string>& attributes);
  // Flushes and closes the file, checked; throws naming the path and the OS's
  // reason (No space left on device) when the data did not reach the disk.
  void Close();

 private:
  void Discard() noexcept;  // closes unchecked and removes the file

  std::string path_;
  int64_t dimension_;
  bool sentences_;
  int64_t sentence_count_ = 0, paragraph_count_ = 0;
  std::unique_ptr<files::LockFile> lock_;  // <path>.lock while the file is written; released after file_
  std::unique_ptr<data::shard_format::Handle> file_;
};

// Collective. Returns the number of documents embedded.
int64_t RunEmbedding(const EmbedOptions& options, dist::ProcessGroup& group);

// The same, with a model already loaded (eval embeds before scoring).
int64_t EmbedCorpus(model::DocumentModel& model, const std::string& model_folder, const data::Corpus& corpus,
                    const std::string& output, int64_t batch_size, bool progress, dist::ProcessGroup& group);

// `docmatch fuse`: one embeddings file in which the cosine of two documents
// is the weighted mean of their cosines in the inputs (weights: one each when
// empty). Each input's rows are scaled to unit length and by sqrt(w / sum of
// the weights), and set side by side (the dimension is the inputs' sum). The
// rows follow the first input's order; every input must hold the same
// documents, and none a zero vector (it has no cosine). SDR files enter by
// their mean sentence vectors; SMASH files (a pair head's score) are refused.
// One input may score by MaxSim (match_bert maxsim): its windows are kept,
// each with the other inputs' scaled vectors of its document beside it, so
// that the fused file's MaxSim is w * MaxSim + the others' weighted cosines
// (the added term is the same for every pair of windows of two documents, so
// it passes through the max and the mean unchanged).
// The file's kind is "fused" and it names no model: eval reads it without
// --model (--lexical-weight included), search by --id. Written under a
// temporary name and renamed when complete. Returns the number of rows.
int64_t FuseEmbeddings(const std::vector<std::string>& inputs, std::vector<double> weights, const std::string& output);

// A read-only embeddings file; throws naming the file when it is not one.
class EmbeddingFile {
 public:
  explicit EmbeddingFile(std::string path);
  const std::string& path() const { return path_; }
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }
  int64_t dimension() const { return dimension_; }
  const std::string& kind() const { return kind_; }
  const std::string& model() const { return model_; }
  // The corpus folder `embed` read ("" for files written elsewhere or before
  // the attribute existed).
  const std::string& corpus() const { return corpus_; }
  // A fused file's inputs: "share path (what made it); ..." ("" otherwise).
  const std::string& fused_from() const { return fused_from_; }
  const std::vector<std::string>& ids() const { return ids_; }
  // The row of document `id`, or nullopt (ids are unique: the reader checks).
  std::optional<int64_t> Row(const std::string& id) const {
    const auto it = rows_.find(id);
    return it == rows_.end() ? std::nullopt : std::optional<int64_t>(it->second);
  }
  // Throws unless row i holds document i of `corpus` for every i (what eval
  // and hybrid search need), naming the first row that does not; the message
  // starts with "[<stage>]" and ends with `fix`.
  void CheckCorpusOrder(const data::Corpus& corpus, const std::string& stage, const std::string& fix) const;
  // Rows [begin, end) of the vectors, float32 (end - begin, D).
  torch::Tensor Vectors(int64_t begin, int64_t end) const;
  bool has_sentences() const { return !document_offsets_.empty(); }
  // "sdr", "maxsim" or "cosine": how two of its documents score (above).
  std::string score() const { return !has_sentences() ? "cosine" : kind_ == "sdr" ? "sdr" : "maxsim"; }
  // Documents [begin, end) as sentence vectors and paragraphs (SDR files).
  std::vector<model::DocumentSentences> Sentences(int64_t begin, int64_t end) const;

 private:
  // Throws naming the file and row when `rows` (read from row `first_row`
  // of `dataset`) holds a NaN or an infinity.
  void CheckFinite(const torch::Tensor& rows, int64_t first_row, const std::string& dataset) const;

  std::string path_, kind_, model_, corpus_, fused_from_;
  int64_t dimension_ = 0;
  std::vector<std::string> ids_;
  std::unordered_map<std::string, int64_t> rows_;  // id -> row
  std::vector<int64_t> paragraph_offsets_, document_offsets_;
};

}  // namespace docmatch::eval
