// How the rest of docmatch sees a MatchBERT model: its DocumentModel, its
// config keys and checks, and its row of the kind registry (model/kinds.h).
#include <algorithm>

#include "console/error.h"
#include "model/config.h"
#include "model/document_model.h"
#include "model/host_to_device.h"
#include "model/kinds.h"

namespace docmatch::model {
namespace {

class MatchBertModel : public DocumentModel {
 public:
  explicit MatchBertModel(const ModelConfig& config) : DocumentModel(config), encoder_(config.match_bert) {}
  torch::nn::Module& module() override { return *encoder_; }
  int64_t dimension() const override { return config().match_bert.hidden; }
  std::shared_ptr<const HostBatch> Batch(const std::vector<const data::Document*>& documents) const override {
    return std::make_shared<HeldBatch<data::FlatBatch>>(data::BuildFlatBatch(documents, config().match_bert.Flat()));
  }
  torch::Tensor EmbedBatch(const HostBatch& batch, const torch::Device& device) override {
    return encoder_->Documents(BatchOf<data::FlatBatch>(batch), device);
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
    DOCMATCH_CHECK(has_sentences(), "model", "MatchBERT keeps its windows' vectors only with window_pooling maxsim");
    const data::FlatBatch batch = data::BuildFlatBatch(documents, config().match_bert.Flat());
    const torch::Tensor rows = encoder_->RowsWithoutGraph(batch, device);  // (B, C), a document's windows in a run
    std::vector<DocumentSentences> out(documents.size());
    for (int64_t first = 0; first < batch.B;) {
      const int64_t document = batch.row_document[first];
      int64_t end = first + 1;
      while (end < batch.B && batch.row_document[end] == document) ++end;
      DOCMATCH_CHECK(!out[document].vectors.defined(), "model", "the windows of a document are not consecutive rows");
      out[document].vectors = rows.slice(0, first, end);
      out[document].paragraph_offsets = {0, end - first};
      first = end;
    }
    return out;
  }

 private:
  FlatEncoder encoder_;
};

ConfigKeys Keys(ModelConfig& config) {
  MatchBertConfig& c = config.match_bert;
  return TransformerKeys(&c, {{"layers", Key(&c.layers)},
                              {"max_tokens", Key(&c.max_tokens)},
                              {"amplifier", Key(&c.amplifier)},
                              {"pooling", Key(&c.pooling)},
                              {"separator", Key(&c.separator)},
                              {"chunks", Key(&c.chunks)},
                              {"window_pooling", Key(&c.window_pooling)}});
}

void Check(const ModelConfig& config, const std::string& origin) {
  const MatchBertConfig& c = config.match_bert;
  CheckTransformerKeys(c, origin);
  KeyAtLeast(origin, "layers", c.layers, 1, "layers");
  KeyAtLeast(origin, "max_tokens", c.max_tokens, c.separator ? 3 : 2,
             c.separator ? "a window holds [CLS], [SEP] and a word" : "a window holds [CLS] and a word");
  KeyAtLeast(origin, "chunks", c.chunks, 1, "windows a document");
  KeyAtLeast(origin, "amplifier", c.amplifier, 0, "the pair logit's scale");
}

// Its encoder as it is: [CLS] pooling's dense layer has no activation; the
// window pooling's attention has no place in one window's model.
HfLayout HfFolder(const ModelConfig& config) {
  const MatchBertConfig& m = config.match_bert;
  HfLayout e{"MatchBERT's encoder", "encoder",    m.vocab_size, m.hidden,    m.layers, m.heads,
             m.intermediate,        m.max_tokens, m.dropout,    m.separator, m.pooling};
  if (m.pooling == "cls") e.dense = "dense";
  e.activation = "torch.nn.modules.linear.Identity";
  e.left_out = {"window_"};
  if (m.chunks > 1) {
    e.caveat = "this model pools up to " + std::to_string(m.chunks) + " windows of " + std::to_string(m.max_tokens) +
               " tokens (window_pooling " + m.window_pooling +
               "); sentence-transformers and transformers read the first window, so their vectors equal docmatch's "
               "for texts of up to one window (the docmatch layout keeps the pooling)";
  }
  return e;
}

std::unique_ptr<DocumentModel> Create(const ModelConfig& config) { return std::make_unique<MatchBertModel>(config); }

}  // namespace

const ModelKind& MatchBertKind() {
  static const ModelKind kind{
      "match_bert",
      "flat: one transformer over the first tokens, or over windows (MatchBERT)",
      Keys,
      Check,
      Create,
      /*pair_classifier=*/true,
      /*lower_level=*/nullptr,
      "import-hf --chunks N (or a model's chunks key) averages N windows; SMITH reads blocks of "
      "sentences (import-hf --kind smith)",
      HfFolder};
  return kind;
}

}  // namespace docmatch::model
