// Each kind wrapped as a DocumentModel: its batch, its document vector and its
// pair score behind one interface (document_model.h).
#include "model/document_model.h"

#include "data/batches/blocks.h"
#include "data/batches/flat_batch.h"
#include "data/batches/hierarchy_batch.h"
#include "data/batches/sdr_batch.h"
#include "data/text/tokenizer.h"
#include "model/host_to_device.h"

namespace docmatch::model {
namespace F = torch::nn::functional;
namespace {

torch::Tensor Normalize(const torch::Tensor& x) { return F::normalize(x, F::NormalizeFuncOptions().dim(-1)); }

// Unit vectors: the pair logit is amplifier * cosine.
torch::Tensor CosineLogits(const torch::Tensor& a, const torch::Tensor& b, double amplifier) {
  return amplifier * (Normalize(a) * Normalize(b)).sum(1);
}
torch::Tensor CosineMatrix(const torch::Tensor& q, const torch::Tensor& c, double amplifier) {
  return amplifier * torch::matmul(Normalize(q), Normalize(c).t());
}

// A kind's host batch: what its data::Build* gives.
template <typename T>
struct Held : DocumentModel::HostBatch {
  explicit Held(T v) : value(std::move(v)) {}
  T value;
};
template <typename T>
const T& Get(const DocumentModel::HostBatch& batch) {
  const auto* held = dynamic_cast<const Held<T>*>(&batch);
  TORCH_CHECK(held != nullptr, "[model] a batch built by another kind of model");
  return held->value;
}

class SmithModel : public DocumentModel {
 public:
  explicit SmithModel(const ModelConfig& config) : DocumentModel(config), encoder_(config.smith) {}
  torch::nn::Module& module() override { return *encoder_; }
  int64_t dimension() const override { return encoder_->dimension(); }
  std::shared_ptr<const HostBatch> Batch(const std::vector<const data::Document*>& documents) const override {
    return std::make_shared<Held<data::BlockBatch>>(
        data::BuildBlockBatch(documents, config().smith.Blocks(), nullptr, 0));
  }
  torch::Tensor EmbedBatch(const HostBatch& batch, const torch::Device& device) override {
    return encoder_(ToTensors(Get<data::BlockBatch>(batch), device));
  }
  int64_t TokensRead(const data::Document& document) const override {
    const data::BlockOptions blocks = config().smith.Blocks();
    const int64_t special = blocks.separator ? 2 : 1;  // [CLS] (+ [SEP]) in every block
    int64_t read = 0;
    for (const auto& block : data::PackBlocks(document, blocks)) read += static_cast<int64_t>(block.size()) - special;
    return read;
  }
  torch::Tensor PairLogits(const torch::Tensor& a, const torch::Tensor& b) override {
    return CosineLogits(a, b, config().smith.amplifier);
  }
  torch::Tensor ScoreMatrix(const torch::Tensor& q, const torch::Tensor& c) override {
    return CosineMatrix(q, c, config().smith.amplifier);
  }

 private:
  SmithEncoder encoder_;
};

class MatchBertModel : public DocumentModel {
 public:
  explicit MatchBertModel(const ModelConfig& config) : DocumentModel(config), encoder_(config.match_bert) {}
  torch::nn::Module& module() override { return *encoder_; }
  int64_t dimension() const override { return config().match_bert.hidden; }
  std::shared_ptr<const HostBatch> Batch(const std::vector<const data::Document*>& documents) const override {
    return std::make_shared<Held<data::FlatBatch>>(data::BuildFlatBatch(documents, config().match_bert.Flat()));
  }
  torch::Tensor EmbedBatch(const HostBatch& batch, const torch::Device& device) override {
    return encoder_->Documents(Get<data::FlatBatch>(batch), device);
  }
  int64_t TokensRead(const data::Document& document) const override {
    const data::FlatOptions flat = config().match_bert.Flat();
    const int64_t room = flat.max_tokens - (flat.separator ? 2 : 1);  // [CLS] (+ [SEP]) in every window
    return std::min(document.num_tokens(), flat.chunks * room);
  }
  torch::Tensor PairLogits(const torch::Tensor& a, const torch::Tensor& b) override {
    return CosineLogits(a, b, config().match_bert.amplifier);
  }
  torch::Tensor ScoreMatrix(const torch::Tensor& q, const torch::Tensor& c) override {
    return CosineMatrix(q, c, config().match_bert.amplifier);
  }
  // window_pooling maxsim: each document's window vectors, as one paragraph.
  bool has_sentences() const override { return config().match_bert.window_pooling == "maxsim"; }
  std::vector<DocumentSentences> EmbedSentences(const std::vector<const data::Document*>& documents,
                                                const torch::Device& device) override {
    TORCH_CHECK(has_sentences(), "[model] MatchBERT keeps its windows' vectors only with window_pooling maxsim");
    const data::FlatBatch batch = data::BuildFlatBatch(documents, config().match_bert.Flat());
    const torch::Tensor rows = encoder_->RowsWithoutGraph(batch, device);  // (B, C), a document's windows in a run
    std::vector<DocumentSentences> out(documents.size());
    for (int64_t first = 0; first < batch.B;) {
      const int64_t document = batch.row_document[first];
      int64_t end = first + 1;
      while (end < batch.B && batch.row_document[end] == document) ++end;
      TORCH_CHECK(!out[document].vectors.defined(), "[model] the windows of a document are not consecutive rows");
      out[document].vectors = rows.slice(0, first, end);
      out[document].paragraph_offsets = {0, end - first};
      first = end;
    }
    return out;
  }

 private:
  FlatEncoder encoder_;
};

class SmashModel : public DocumentModel {
 public:
  explicit SmashModel(const ModelConfig& config) : DocumentModel(config), pair_(config.smash) {}
  torch::nn::Module& module() override { return *pair_; }
  int64_t dimension() const override { return pair_->encoder->output_size(); }
  std::shared_ptr<const HostBatch> Batch(const std::vector<const data::Document*>& documents) const override {
    return std::make_shared<Held<data::HierarchyBatch>>(data::BuildHierarchyBatch(documents, config().smash.input));
  }
  torch::Tensor EmbedBatch(const HostBatch& batch, const torch::Device& device) override {
    return pair_->encoder(ToTensors(Get<data::HierarchyBatch>(batch), device));
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

class SdrModel : public DocumentModel {
 public:
  explicit SdrModel(const ModelConfig& config) : DocumentModel(config), encoder_(config.sdr) {}
  torch::nn::Module& module() override { return *encoder_; }
  int64_t dimension() const override { return config().sdr.hidden; }
  std::shared_ptr<const HostBatch> Batch(const std::vector<const data::Document*>& documents) const override {
    return std::make_shared<Held<SentenceRows>>(Rows(documents));
  }
  torch::Tensor EmbedBatch(const HostBatch& batch, const torch::Device& device) override {
    std::vector<torch::Tensor> means;
    for (const DocumentSentences& d : Sentences(Get<SentenceRows>(batch), device))
      means.push_back(MeanSentenceVector(d));
    return torch::stack(means);
  }
  torch::Tensor PairLogits(const torch::Tensor& a, const torch::Tensor& b) override { return CosineLogits(a, b, 1.0); }
  torch::Tensor ScoreMatrix(const torch::Tensor& q, const torch::Tensor& c) override { return CosineMatrix(q, c, 1.0); }
  bool has_sentences() const override { return true; }
  int64_t TokensRead(const data::Document& document) const override {
    const int64_t marks = config().sdr.separator ? 2 : 0;  // [CLS] s [SEP]
    int64_t read = 0;
    for (int64_t s = 0; s < document.num_sentences(); ++s) {
      read += static_cast<int64_t>(
                  data::SdrSentenceRow(document, s, config().sdr.max_tokens, config().sdr.separator).size()) -
              marks;
    }
    return read;
  }

  std::vector<DocumentSentences> EmbedSentences(const std::vector<const data::Document*>& documents,
                                                const torch::Device& device) override {
    return Sentences(Rows(documents), device);
  }

 private:
  // All sentences of all documents in one padded batch (rows x T), each read
  // as training reads it (data::SdrSentenceRow); an empty row reads as one
  // <unk> so that every row has a token.
  struct SentenceRows {
    std::vector<int32_t> tokens;  // (rows, T)
    int64_t rows = 0, T = 1;
    std::vector<int64_t> sentences;                       // per document
    std::vector<std::vector<int64_t>> paragraph_offsets;  // per document
  };
  SentenceRows Rows(const std::vector<const data::Document*>& documents) const {
    SentenceRows out;
    std::vector<std::vector<int32_t>> sentence_rows;
    for (const data::Document* d : documents) {
      TORCH_CHECK(d->num_sentences() > 0, "[embed] document '", d->id, "' has no sentences");
      for (int64_t s = 0; s < d->num_sentences(); ++s) {
        sentence_rows.push_back(data::SdrSentenceRow(*d, s, config().sdr.max_tokens, config().sdr.separator));
        if (sentence_rows.back().empty()) sentence_rows.back().push_back(data::kUnkId);
        out.T = std::max<int64_t>(out.T, sentence_rows.back().size());
      }
      out.sentences.push_back(d->num_sentences());
      out.paragraph_offsets.push_back(d->paragraph_offsets);
    }
    out.rows = static_cast<int64_t>(sentence_rows.size());
    out.tokens.assign(out.rows * out.T, data::kPadId);
    for (int64_t r = 0; r < out.rows; ++r)
      std::copy(sentence_rows[r].begin(), sentence_rows[r].end(), out.tokens.begin() + r * out.T);
    return out;
  }
  // Sentences of a batch of documents: with a graph (fine-tuning) in one
  // pass; without one (embed, eval, search, mining) kRowsPerPass at a time,
  // sentences of like length together, in memory bounded by one pass.
  static constexpr int64_t kRowsPerPass = 256;
  std::vector<DocumentSentences> Sentences(const SentenceRows& batch, const torch::Device& device) {
    const torch::Tensor vectors = Normalize(
        torch::GradMode::is_enabled()
            ? encoder_(HostToDevice(batch.tokens.data(), {batch.rows, batch.T}, torch::kInt32, device, torch::kLong))
            : EncodeRowsWithoutGraph(batch.tokens.data(), batch.rows, batch.T, device, kRowsPerPass,
                                     [this](const torch::Tensor& ids) { return encoder_(ids); }));
    std::vector<DocumentSentences> out;
    int64_t row = 0;
    for (size_t d = 0; d < batch.sentences.size(); ++d) {
      out.push_back({vectors.slice(0, row, row + batch.sentences[d]), batch.paragraph_offsets[d]});
      row += batch.sentences[d];
    }
    return out;
  }

  SentenceEncoder encoder_;
};

}  // namespace

torch::Tensor MeanSentenceVector(const DocumentSentences& document) { return Normalize(document.vectors.mean(0)); }

std::unique_ptr<DocumentModel> DocumentModel::Create(const ModelConfig& config) {
  if (config.kind == "smith") return std::make_unique<SmithModel>(config);
  if (config.kind == "match_bert") return std::make_unique<MatchBertModel>(config);
  if (config.kind == "smash") return std::make_unique<SmashModel>(config);
  if (config.kind == "sdr") return std::make_unique<SdrModel>(config);
  throw std::runtime_error("model kind '" + config.kind + "' is not one of smith, match_bert, sdr, smash");
}

std::vector<DocumentSentences> DocumentModel::EmbedSentences(const std::vector<const data::Document*>&,
                                                             const torch::Device&) {
  throw std::logic_error("a " + config_.kind + " model has no sentence vectors");
}

}  // namespace docmatch::model
