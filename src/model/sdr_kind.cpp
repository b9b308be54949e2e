// How the rest of docmatch sees an SDR model: its DocumentModel, its
// config keys and checks, and its row of the kind registry (model/kinds.h).
#include <algorithm>

#include "console/error.h"
#include "data/batches/sdr_batch.h"
#include "data/text/tokenizer.h"
#include "model/config.h"
#include "model/document_model.h"
#include "model/host_to_device.h"
#include "model/kinds.h"

namespace docmatch::model {
namespace {
namespace F = torch::nn::functional;

torch::Tensor Normalize(const torch::Tensor& x) { return F::normalize(x, F::NormalizeFuncOptions().dim(-1)); }

class SdrModel : public DocumentModel {
 public:
  explicit SdrModel(const ModelConfig& config) : DocumentModel(config), encoder_(config.sdr) {}
  torch::nn::Module& module() override { return *encoder_; }
  int64_t dimension() const override { return config().sdr.hidden; }
  std::shared_ptr<const HostBatch> Batch(const std::vector<const data::Document*>& documents) const override {
    return std::make_shared<HeldBatch<SentenceRows>>(Rows(documents));
  }
  torch::Tensor EmbedBatch(const HostBatch& batch, const torch::Device& device) override {
    std::vector<torch::Tensor> means;
    for (const DocumentSentences& d : Sentences(BatchOf<SentenceRows>(batch), device))
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
      DOCMATCH_CHECK(d->num_sentences() > 0, "embed", "document '", d->id, "' has no sentences");
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

ConfigKeys Keys(ModelConfig& config) {
  SdrConfig& c = config.sdr;
  return TransformerKeys(&c, {{"layers", Key(&c.layers)},
                              {"max_tokens", Key(&c.max_tokens)},
                              {"margin", Key(&c.margin)},
                              {"separator", Key(&c.separator)}});
}

void Check(const ModelConfig& config, const std::string& origin) {
  const SdrConfig& c = config.sdr;
  CheckTransformerKeys(c, origin);
  KeyAtLeast(origin, "layers", c.layers, 1, "layers");
  KeyAtLeast(origin, "max_tokens", c.max_tokens, c.separator ? 3 : 1,
             c.separator ? "a sentence holds [CLS], [SEP] and a word" : "a sentence holds a word");
  KeyBetween(origin, "margin", c.margin, 0, 2);
}

std::unique_ptr<DocumentModel> Create(const ModelConfig& config) { return std::make_unique<SdrModel>(config); }

// Its sentence encoder: a text read as one sentence, its vector the mean of
// the token states; the word-LM head of pre-training stays behind.
HfLayout HfFolder(const ModelConfig& config) {
  const SdrConfig& s = config.sdr;
  HfLayout e{"SDR's sentence encoder (a text read as one sentence)",
             "encoder",
             s.vocab_size,
             s.hidden,
             s.layers,
             s.heads,
             s.intermediate,
             s.max_tokens,
             s.dropout,
             s.separator,
             "mean"};
  e.left_out = {"lm_"};
  return e;
}

}  // namespace

const ModelKind& SdrKind() {
  static const ModelKind kind{"sdr",
                              "sentences: a transformer per sentence, scored hierarchically (SDR)",
                              Keys,
                              Check,
                              Create,
                              /*pair_classifier=*/false,
                              /*lower_level=*/nullptr,
                              "the model config's length limits set how much is read",
                              HfFolder};
  return kind;
}

}  // namespace docmatch::model
