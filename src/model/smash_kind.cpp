// How the rest of docmatch sees a SMASH model: its DocumentModel, its
// config keys and checks, and its row of the kind registry (model/kinds.h).
#include <algorithm>

#include "data/batches/hierarchy_batch.h"
#include "model/config.h"
#include "model/document_model.h"
#include "model/host_to_device.h"
#include "model/kinds.h"

namespace docmatch::model {
namespace {

class SmashModel : public DocumentModel {
 public:
  explicit SmashModel(const ModelConfig& config) : DocumentModel(config), pair_(config.smash) {}
  torch::nn::Module& module() override { return *pair_; }
  int64_t dimension() const override { return pair_->encoder->output_size(); }
  std::shared_ptr<const HostBatch> Batch(const std::vector<const data::Document*>& documents) const override {
    return std::make_shared<HeldBatch<data::HierarchyBatch>>(
        data::BuildHierarchyBatch(documents, config().smash.input));
  }
  torch::Tensor EmbedBatch(const HostBatch& batch, const torch::Device& device) override {
    return pair_->encoder(ToTensors(BatchOf<data::HierarchyBatch>(batch), device));
  }
  // The union of what the chosen depths read (SmashConfig::depths): the
  // paragraph grid, the first sentences, the first words.
  int64_t TokensRead(const data::Document& document) const override {
    const std::string& depths = config().smash.depths;
    const data::HierarchyOptions& input = config().smash.input;
    const auto has = [&](char depth) {
      for (size_t start = 0; start <= depths.size();) {
        const size_t end = std::min(depths.find('+', start), depths.size());
        if (depths.substr(start, end - start) == std::string(1, depth)) return true;
        start = end + 1;
      }
      return false;
    };
    std::vector<bool> read(document.num_tokens(), false);
    const auto mark = [&](int64_t sentence, int64_t words) {
      const int64_t first = document.sentence_offsets[sentence];
      for (int64_t t = first; t < first + std::min(document.sentence_length(sentence), words); ++t) read[t] = true;
    };
    if (has('P')) {
      for (int64_t p = 0; p < std::min(document.num_paragraphs(), input.max_paragraphs); ++p) {
        const int64_t first = document.paragraph_offsets[p];
        const int64_t last = std::min(document.paragraph_offsets[p + 1], first + input.max_sentences);
        for (int64_t s = first; s < last; ++s) mark(s, input.max_words);
      }
    }
    if (has('S')) {
      for (int64_t s = 0; s < std::min(document.num_sentences(), input.max_document_sentences); ++s)
        mark(s, input.max_words);
    }
    if (has('W'))
      std::fill(read.begin(), read.begin() + std::min(document.num_tokens(), input.max_document_words), true);
    return std::count(read.begin(), read.end(), true);
  }
  // The head's parameters may sit on another device than the vectors it
  // scores (search keeps the model on the GPU for its text queries and reads
  // the file's vectors on the host): the vectors go to the head, the logits
  // come back to theirs.
  torch::Tensor PairLogits(const torch::Tensor& a, const torch::Tensor& b) override {
    const torch::Device head = HeadDevice();
    return pair_->Head(a.to(head), b.to(head)).to(a.device());
  }
  torch::Tensor ScoreMatrix(const torch::Tensor& q, const torch::Tensor& c) override {
    const torch::Device head = HeadDevice();
    return pair_->ScoreMatrix(q.to(head), c.to(head)).to(q.device());
  }
  bool cosine() const override { return false; }

 private:
  torch::Device HeadDevice() const { return pair_->parameters().front().device(); }

  SmashPair pair_;
};

ConfigKeys Keys(ModelConfig& config) {
  SmashConfig& c = config.smash;
  return {{"vocab_size", Key(&c.vocab_size)},
          {"embedding", Key(&c.embedding)},
          {"gru_units", Key(&c.gru_units)},
          {"depths", Key(&c.depths)},
          {"pair_hidden", Key(&c.pair_hidden)},
          {"dropout", Key(&c.dropout)},
          {"max_paragraphs", Key(&c.input.max_paragraphs)},
          {"max_sentences", Key(&c.input.max_sentences)},
          {"max_words", Key(&c.input.max_words)},
          {"max_document_sentences", Key(&c.input.max_document_sentences)},
          {"max_document_words", Key(&c.input.max_document_words)}};
}

void Check(const ModelConfig& config, const std::string& origin) {
  const SmashConfig& c = config.smash;
  KeyAtLeast(origin, "embedding", c.embedding, 1, "word vector size");
  KeyAtLeast(origin, "gru_units", c.gru_units, 1, "GRU width");
  KeyAtLeast(origin, "pair_hidden", c.pair_hidden, 1, "the pair head's width");
  KeyBetween(origin, "dropout", c.dropout, 0, 1);
  KeyAtLeast(origin, "max_paragraphs", c.input.max_paragraphs, 1, "paragraphs a document");
  KeyAtLeast(origin, "max_sentences", c.input.max_sentences, 1, "sentences a paragraph");
  KeyAtLeast(origin, "max_words", c.input.max_words, 1, "words a sentence");
  KeyAtLeast(origin, "max_document_sentences", c.input.max_document_sentences, 1, "sentences a document");
  KeyAtLeast(origin, "max_document_words", c.input.max_document_words, 1, "words a document");
}

std::unique_ptr<DocumentModel> Create(const ModelConfig& config) { return std::make_unique<SmashModel>(config); }

}  // namespace

const ModelKind& SmashKind() {
  static const ModelKind kind{
      "smash",
      "recurrent: GRUs with attention over words, sentences, paragraphs, and a pair head (SMASH RNN)",
      Keys,
      Check,
      Create,
      /*pair_classifier=*/true,
      /*lower_level=*/nullptr,
      "the model config's length limits set how much is read",
      /*hf_layout=*/nullptr};
  return kind;
}

}  // namespace docmatch::model
