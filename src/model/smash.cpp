// SMASH RNN's attention BiGRU hierarchies per depth, HAN, and the Siamese pair
// head (smash.h).
#include "model/smash.h"

#include "console/error.h"
#include "data/text/tokenizer.h"
#include "model/host_to_device.h"

namespace docmatch::model {
namespace rnn = torch::nn::utils::rnn;

namespace {

// Host lengths (a count per row) as an int64 CPU tensor.
torch::Tensor HostLengths(std::vector<int64_t> lengths) { return torch::tensor(lengths, torch::kLong); }

// The rows of `lengths` that are not empty, with their lengths (smash.h).
SequenceRows NonEmpty(const std::vector<int64_t>& lengths, const torch::Device& device) {
  std::vector<int64_t> rows, kept;
  for (size_t row = 0; row < lengths.size(); ++row) {
    if (lengths[row] == 0) continue;
    rows.push_back(static_cast<int64_t>(row));
    kept.push_back(lengths[row]);
  }
  return {HostToDevice(rows.data(), {static_cast<int64_t>(rows.size())}, torch::kInt64, device, torch::kLong),
          HostLengths(kept)};
}

// Real (non-pad) ids in each of `count` rows of `width` ids.
std::vector<int64_t> RealIds(const std::vector<int32_t>& ids, int64_t count, int64_t width) {
  std::vector<int64_t> lengths(count, 0);
  for (int64_t row = 0; row < count; ++row) {
    for (int64_t at = row * width; at < (row + 1) * width; ++at) lengths[row] += ids[at] != data::kPadId;
  }
  return lengths;
}

// Non-empty rows in each group of `per` consecutive rows.
std::vector<int64_t> NonEmptyRows(const std::vector<int64_t>& lengths, int64_t per) {
  std::vector<int64_t> counts(lengths.size() / per, 0);
  for (size_t row = 0; row < lengths.size(); ++row) counts[row / per] += lengths[row] > 0;
  return counts;
}

}  // namespace

HierarchyTensors ToTensors(const data::HierarchyBatch& batch, const torch::Device& device) {
  const int64_t B = batch.B, P = batch.P, S = batch.S, W = batch.W, D = batch.D, L = batch.L, N = batch.N;
  HierarchyTensors t;
  t.tokens = HostToDevice(batch.tokens.data(), {B, P, S, W}, torch::kInt32, device, torch::kLong);
  t.sentences = HostToDevice(batch.sentences.data(), {B, D, L}, torch::kInt32, device, torch::kLong);
  t.words = HostToDevice(batch.words.data(), {B, N}, torch::kInt32, device, torch::kLong);
  const std::vector<int64_t> grid_words = RealIds(batch.tokens, B * P * S, W);
  const std::vector<int64_t> paragraph_sentences = NonEmptyRows(grid_words, S);
  const std::vector<int64_t> view_words = RealIds(batch.sentences, B * D, L);
  t.grid_sentences = NonEmpty(grid_words, device);
  t.paragraphs = NonEmpty(paragraph_sentences, device);
  t.view_sentences = NonEmpty(view_words, device);
  t.document_paragraphs = HostLengths(NonEmptyRows(paragraph_sentences, P));
  t.document_sentences = HostLengths(NonEmptyRows(view_words, D));
  t.document_words = HostLengths(RealIds(batch.words, B, N));
  return t;
}

AttentionPoolingImpl::AttentionPoolingImpl(int64_t channels) {
  project_ = register_module("project", torch::nn::Linear(channels, channels));
  context_ = register_parameter("context", torch::randn({channels}) * 0.1);
}

torch::Tensor AttentionPoolingImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  const torch::Tensor scores = torch::matmul(torch::tanh(project_(x)), context_);  // (N, L)
  const torch::Tensor weights = torch::softmax(scores.masked_fill(mask.logical_not(), -1e9), 1);
  return (weights.unsqueeze(-1) * x).sum(1);
}

GruAttentionImpl::GruAttentionImpl(int64_t input, int64_t units) {
  gru_ =
      register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(input, units).batch_first(true).bidirectional(true)));
  pooling_ = register_module("pooling", AttentionPooling(2 * units));
}

torch::Tensor GruAttentionImpl::forward(const torch::Tensor& given, const torch::Tensor& lengths) {
  DOCMATCH_CHECK(lengths.is_cpu(), "model", "SMASH's lengths live on the host, where packing reads them");
  // In float32, outside autocast: PyTorch's autocast wrapper of cuDNN's RNNs
  // casts them to fp16 whatever autocast's dtype, so under --precision bf16
  // the GRU would run in fp16 with no loss scaling to keep its small
  // gradients from flushing to zero. Only embeddings feed SMASH's GRUs, so
  // under bf16 the whole encoder runs in float32; only the pair head's
  // layers take bf16.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const torch::Tensor x = given.to(torch::kFloat);
  const int64_t L = x.size(1);
  // Packing takes the sequences longest first. The order and its inverse are
  // found on the host, where the lengths are, and sent pinned: rnn::
  // pack_padded_sequence would send the order by a pageable copy that waits
  // for the device, and pad_packed_sequence read it back.
  const auto [sorted, order] = lengths.sort(/*dim=*/0, /*descending=*/true);
  const torch::Tensor inverse = torch::empty_like(order).scatter_(0, order, torch::arange(order.size(0)));
  const torch::Tensor longest_first = HostToDevice(order, x.device(), torch::kLong);
  const torch::Tensor as_given = HostToDevice(inverse, x.device(), torch::kLong);
  const auto [data, batch_sizes] =
      torch::_pack_padded_sequence(x.index_select(0, longest_first), sorted, /*batch_first=*/true);
  const auto [output, unused] = gru_->forward_with_packed_input(rnn::PackedSequence(data, batch_sizes));
  const torch::Tensor states =
      std::get<0>(torch::_pad_packed_sequence(output.data(), output.batch_sizes(), /*batch_first=*/true,
                                              /*padding_value=*/0.0, /*total_length=*/L))
          .index_select(0, as_given);  // (N, L, 2 * units)
  const torch::Tensor mask = HostToDevice(torch::arange(L).unsqueeze(0) < lengths.unsqueeze(1), x.device(),
                                          torch::kBool);  // (N, L)
  return pooling_(states, mask);
}

SmashEncoderImpl::SmashEncoderImpl(const SmashConfig& config) : config_(config) {
  for (size_t start = 0; start <= config.depths.size();) {
    const size_t end = std::min(config.depths.find('+', start), config.depths.size());
    const std::string depth = config.depths.substr(start, end - start);
    if (depth == "P") {
      paragraph_depth_ = true;
    } else if (depth == "S") {
      sentence_depth_ = true;
    } else if (depth == "W") {
      word_depth_ = true;
    } else {
      TORCH_CHECK(false, "SMASH depths '", config.depths, "': '", depth, "' is not P, S or W");
    }
    start = end + 1;
  }
  for (const auto& [key, value] : {std::pair<const char*, int64_t>{"max_paragraphs", config.input.max_paragraphs},
                                   {"max_sentences", config.input.max_sentences},
                                   {"max_words", config.input.max_words},
                                   {"max_document_sentences", config.input.max_document_sentences},
                                   {"max_document_words", config.input.max_document_words}}) {
    TORCH_CHECK(value >= 1, "SMASH model key ", key, " is ", value, "; it must be at least 1");
  }
  const int64_t E = config.embedding, U = config.gru_units;
  embedding_ = register_module(
      "embedding", torch::nn::Embedding(torch::nn::EmbeddingOptions(config.vocab_size, E).padding_idx(data::kPadId)));
  dropout_ = register_module("dropout", torch::nn::Dropout(config.dropout));
  if (paragraph_depth_) {
    p_word_to_sentence_ = register_module("p_word_to_sentence", GruAttention(E, U));
    p_sentence_to_paragraph_ = register_module("p_sentence_to_paragraph", GruAttention(2 * U, U));
    p_paragraph_to_document_ = register_module("p_paragraph_to_document", GruAttention(2 * U, U));
  }
  if (sentence_depth_) {
    s_word_to_sentence_ = register_module("s_word_to_sentence", GruAttention(E, U));
    s_sentence_to_document_ = register_module("s_sentence_to_document", GruAttention(2 * U, U));
  }
  if (word_depth_) w_word_to_document_ = register_module("w_word_to_document", GruAttention(E, U));
}

int64_t SmashEncoderImpl::output_size() const {
  return 2 * config_.gru_units * (paragraph_depth_ + sentence_depth_ + word_depth_);
}

torch::Tensor SmashEncoderImpl::EncodeSentences(GruAttention& words_to_sentence, const torch::Tensor& rows,
                                                const SequenceRows& real) {
  const torch::Tensor vectors = words_to_sentence(dropout_(embedding_(rows.index_select(0, real.rows))), real.lengths);
  return torch::zeros({rows.size(0), vectors.size(1)}, vectors.options()).index_copy(0, real.rows, vectors);
}

torch::Tensor SmashEncoderImpl::forward(const HierarchyTensors& batch) {
  const int64_t B = batch.tokens.size(0);
  const int64_t C = 2 * config_.gru_units;
  std::vector<torch::Tensor> depths;
  if (paragraph_depth_) {
    // Words -> sentence over the grid's real sentences, sentence -> paragraph
    // over the real paragraphs, then paragraph -> document.
    const int64_t P = batch.tokens.size(1), S = batch.tokens.size(2), W = batch.tokens.size(3);
    const torch::Tensor sentences =
        EncodeSentences(p_word_to_sentence_, batch.tokens.reshape({B * P * S, W}), batch.grid_sentences);
    const SequenceRows& real = batch.paragraphs;
    const torch::Tensor vectors =
        p_sentence_to_paragraph_(sentences.view({B * P, S, C}).index_select(0, real.rows), real.lengths);
    const torch::Tensor paragraphs = torch::zeros({B * P, C}, vectors.options()).index_copy(0, real.rows, vectors);
    depths.push_back(p_paragraph_to_document_(paragraphs.view({B, P, C}), batch.document_paragraphs));
  }
  if (sentence_depth_) {
    // The document's own sentences in order: words -> sentence -> document.
    const int64_t D = batch.sentences.size(1), L = batch.sentences.size(2);
    const torch::Tensor sentences =
        EncodeSentences(s_word_to_sentence_, batch.sentences.reshape({B * D, L}), batch.view_sentences);
    depths.push_back(s_sentence_to_document_(sentences.view({B, D, C}), batch.document_sentences));
  }
  if (word_depth_) depths.push_back(w_word_to_document_(dropout_(embedding_(batch.words)), batch.document_words));
  return torch::cat(depths, 1);
}

SmashPairImpl::SmashPairImpl(const SmashConfig& config) {
  encoder = register_module("encoder", SmashEncoder(config));
  head_ =
      register_module("head", torch::nn::Sequential(torch::nn::Linear(2 * encoder->output_size(), config.pair_hidden),
                                                    torch::nn::ReLU(), torch::nn::Dropout(config.dropout),
                                                    torch::nn::Linear(config.pair_hidden, 1)));
}

torch::Tensor SmashPairImpl::forward(const HierarchyTensors& a, const HierarchyTensors& b) {
  return Head(encoder(a), encoder(b));
}

torch::Tensor SmashPairImpl::Head(const torch::Tensor& a, const torch::Tensor& b) {
  return head_->forward(torch::cat({a, b}, 1)).squeeze(1);
}

torch::Tensor SmashPairImpl::ScoreMatrix(const torch::Tensor& queries, const torch::Tensor& candidates) {
  const auto& first = head_[0]->as<torch::nn::Linear>();
  const auto& last = head_[3]->as<torch::nn::Linear>();
  const int64_t D = queries.size(1), Q = queries.size(0), N = candidates.size(0);
  const torch::Tensor w = first->weight;                                             // (H, 2D)
  const torch::Tensor q = torch::addmm(first->bias, queries, w.slice(1, 0, D).t());  // (Q, H)
  const torch::Tensor c = torch::matmul(candidates, w.slice(1, D).t());              // (N, H)
  const int64_t H = q.size(1);
  // Candidate chunks keep the (Q, n, H) hidden layer near 16M numbers.
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 24) / std::max<int64_t>(1, Q * H));
  std::vector<torch::Tensor> parts;
  for (int64_t begin = 0; begin < N; begin += chunk) {
    const torch::Tensor hidden = torch::relu(q.unsqueeze(1) + c.slice(0, begin, begin + chunk).unsqueeze(0));
    parts.push_back(torch::matmul(hidden, last->weight.squeeze(0)) + last->bias);  // (Q, n)
  }
  return parts.empty() ? torch::zeros({Q, 0}, queries.options()) : torch::cat(parts, 1);
}

torch::Tensor SmashPairImpl::Loss(const HierarchyTensors& a, const HierarchyTensors& b, const torch::Tensor& labels) {
  const torch::Tensor logits = forward(a, b);
  return torch::nn::functional::binary_cross_entropy_with_logits(logits, labels.to(logits.dtype()));
}

}  // namespace docmatch::model
