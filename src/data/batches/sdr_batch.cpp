// SDR's anchor / partner draws per document, keyed like every other draw, and
// the sentence batch the contrastive loss and the MLM read (sdr_batch.h).
#include "data/batches/sdr_batch.h"

#include <glog/logging.h>

#include <algorithm>
#include <stdexcept>

#include "console/error.h"
#include "data/corpus/random.h"
#include "data/text/tokenizer.h"

namespace docmatch::data {
namespace {

constexpr uint64_t kSdrPairKey = 0x7364727061697273ULL;  // "sdrpairs"

// (anchor, partner) sentence indices: two distinct sentences of one paragraph
// when a paragraph has two, else of the document, else the same sentence.
std::pair<int64_t, int64_t> ChooseSentences(const Document& d, KeyedRandom* random) {
  std::vector<int64_t> rich;  // paragraphs with at least two sentences
  for (int64_t p = 0; p < d.num_paragraphs(); ++p) {
    if (d.paragraph_offsets[p + 1] - d.paragraph_offsets[p] >= 2) rich.push_back(p);
  }
  int64_t first = 0, count = d.num_sentences();
  if (!rich.empty()) {
    const int64_t p = rich[random->Below(rich.size())];
    first = d.paragraph_offsets[p];
    count = d.paragraph_offsets[p + 1] - first;
  }
  if (count < 2) return {first, first};
  const int64_t a = static_cast<int64_t>(random->Below(count));
  const int64_t b = (a + 1 + static_cast<int64_t>(random->Below(count - 1))) % count;
  return {first + a, first + b};
}

}  // namespace

std::vector<int32_t> SdrSentenceRow(const Document& d, int64_t s, int64_t max_tokens, bool separator) {
  const int64_t marks = separator ? 2 : 0;
  if (max_tokens <= marks) {
    throw Error("data", "SDR: sentences of " + std::to_string(max_tokens) +
                            " tokens leave no room for words: the model's max_tokens must be at least " +
                            std::to_string(marks + 1));
  }
  const auto begin = d.tokens.begin() + d.sentence_offsets[s];
  std::vector<int32_t> row;
  if (separator) row.push_back(kClsId);
  row.insert(row.end(), begin, begin + std::min(d.sentence_length(s), max_tokens - marks));
  if (separator) row.push_back(kSepId);
  return row;
}

SdrBatch BuildSdrBatch(const std::vector<const Document*>& documents, const SdrOptions& options,
                       const MaskOptions* masks, int64_t epoch, int64_t global_offset, int64_t global_size) {
  SdrBatch batch;
  batch.B = static_cast<int64_t>(documents.size());
  const int64_t G = global_size < 0 ? batch.B : global_size;
  if (global_offset + batch.B > G) throw std::logic_error("[data] SDR: batch outside the global batch");
  std::vector<std::vector<int32_t>> anchors, partners;
  for (const Document* d : documents) {
    if (d->num_sentences() == 0) {
      throw Error("data", "SDR: document '" + d->id + "' has no sentences");
    }
    KeyedRandom random(options.seed, {kSdrPairKey, static_cast<uint64_t>(epoch), static_cast<uint64_t>(d->index)});
    const auto [a, p] = ChooseSentences(*d, &random);
    anchors.push_back(SdrSentenceRow(*d, a, options.max_tokens, options.separator));
    partners.push_back(SdrSentenceRow(*d, p, options.max_tokens, options.separator));
    batch.T =
        std::max({batch.T, static_cast<int64_t>(anchors.back().size()), static_cast<int64_t>(partners.back().size())});
    // Positive with probability positive_rate; a negative needs a batch mate.
    const bool positive = G < 2 || random.Uniform() < options.positive_rate;
    const int64_t g = global_offset + static_cast<int64_t>(batch.document_index.size());  // global position
    batch.pair.push_back(positive ? g : (g + 1 + static_cast<int64_t>(random.Below(G - 1))) % G);
    batch.label.push_back(positive ? 1.0f : 0.0f);
    batch.document_index.push_back(d->index);
  }
  const int64_t B = batch.B, T = batch.T;
  auto fill = [&](const std::vector<std::vector<int32_t>>& rows, uint64_t view, std::vector<int32_t>* tokens,
                  std::vector<int32_t>* labels) {
    tokens->assign(B * T, kPadId);
    labels->assign(B * T, kIgnoreLabel);
    for (int64_t b = 0; b < B; ++b) {
      std::copy(rows[b].begin(), rows[b].end(), tokens->begin() + b * T);
      if (!masks) continue;
      const int64_t skip = options.separator ? 1 : 0;  // [CLS] and [SEP] are never masked
      std::vector<int64_t> positions;
      for (int64_t t = skip; t < static_cast<int64_t>(rows[b].size()) - skip; ++t) positions.push_back(b * T + t);
      MaskWords(*masks, view, epoch, static_cast<uint64_t>(batch.document_index[b]), positions, tokens, labels);
    }
  };
  fill(anchors, /*view=*/0, &batch.anchors, &batch.anchor_labels);
  fill(partners, /*view=*/1, &batch.partners, &batch.partner_labels);
  return batch;
}

}  // namespace docmatch::data
