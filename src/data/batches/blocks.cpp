// Greedy sentence filling into blocks and SMITH's word and block mask draws,
// all keyed by document so that any rank draws the same masks (blocks.h).
#include "data/batches/blocks.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "console/error.h"
#include "data/corpus/random.h"
#include "data/text/tokenizer.h"

namespace docmatch::data {
namespace {

// Keys that keep these draws apart from every other use of the seed.
constexpr uint64_t kWordMaskKey = 0x776f72646d61736bULL;   // "wordmask"
constexpr uint64_t kBlockMaskKey = 0x626c6f636b6d736bULL;  // "blockmsk"

// The first `count` entries of a uniformly random permutation of 0..n-1.
std::vector<int64_t> Sample(int64_t n, int64_t count, KeyedRandom* random) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = 0; i < count; ++i) std::swap(order[i], order[i + static_cast<int64_t>(random->Below(n - i))]);
  order.resize(count);
  return order;
}

}  // namespace

MaskOptions PretrainingMasks(int64_t vocab_size, uint64_t seed, bool sentence_blocks) {
  MaskOptions masks;
  masks.vocab_size = vocab_size;
  masks.seed = seed;
  if (!sentence_blocks) masks.masked_blocks = 0;
  return masks;
}

void MaskWords(const MaskOptions& masks, uint64_t view, int64_t epoch, uint64_t index,
               const std::vector<int64_t>& positions, std::vector<int32_t>* tokens, std::vector<int32_t>* labels) {
  // BERT's rule: choose 15% of the real tokens; of those 80% become [MASK],
  // 10% a random token, 10% stay; all are predicted.
  KeyedRandom words(masks.seed, {kWordMaskKey, view, static_cast<uint64_t>(epoch), index});
  const int64_t n = static_cast<int64_t>(positions.size());
  const int64_t count = n == 0 ? 0 : std::max<int64_t>(1, std::llround(masks.word_fraction * n));
  for (int64_t chosen : Sample(n, count, &words)) {
    const int64_t p = positions[chosen];
    (*labels)[p] = (*tokens)[p];
    const double r = words.Uniform();
    if (r < masks.replace_mask) {
      (*tokens)[p] = kMaskId;
    } else if (r < masks.replace_mask + masks.replace_random) {
      (*tokens)[p] = kMaskId + 1 + static_cast<int32_t>(words.Below(masks.vocab_size - kMaskId - 1));
    }
  }
}

std::vector<std::vector<int32_t>> PackBlocks(const Document& document, const BlockOptions& options) {
  const int64_t special = options.separator ? 2 : 1;  // [CLS] (+ [SEP])
  if (options.block_length <= special) {
    throw Error("data", "a block of " + std::to_string(options.block_length) + " tokens holds [CLS]" +
                            (options.separator ? ", [SEP]" : "") + " and no word: the model's block_length " +
                            "must be at least " + std::to_string(special + 1));
  }
  const int64_t room = options.block_length - special;
  std::vector<std::vector<int32_t>> blocks;
  std::vector<int32_t> current = {kClsId};
  const auto close = [&] {
    if (options.separator) current.push_back(kSepId);
    blocks.push_back(std::move(current));
    current = {kClsId};
  };
  for (int64_t s = 0; s < document.num_sentences(); ++s) {
    const auto begin = document.tokens.begin() + document.sentence_offsets[s];
    const int64_t length = std::min(document.sentence_offsets[s + 1] - document.sentence_offsets[s], room);
    if (length == 0) continue;
    if (static_cast<int64_t>(current.size()) - 1 + length > room) {
      close();
      if (static_cast<int64_t>(blocks.size()) == options.max_blocks) return blocks;
    }
    current.insert(current.end(), begin, begin + length);
  }
  if (current.size() > 1 && static_cast<int64_t>(blocks.size()) < options.max_blocks) close();
  return blocks;
}

BlockBatch BuildBlockBatch(const std::vector<const Document*>& documents, const BlockOptions& blocks,
                           const MaskOptions* masks, int64_t epoch, const std::vector<uint64_t>& views) {
  if (!views.empty() && views.size() != documents.size()) {
    throw std::logic_error("[data] BuildBlockBatch: one view number per document");
  }
  BlockBatch batch;
  batch.B = static_cast<int64_t>(documents.size());
  std::vector<std::vector<std::vector<int32_t>>> packed;
  packed.reserve(documents.size());
  for (const Document* d : documents) {
    packed.push_back(PackBlocks(*d, blocks));
    batch.S = std::max<int64_t>(batch.S, static_cast<int64_t>(packed.back().size()));
    for (const auto& block : packed.back()) batch.T = std::max<int64_t>(batch.T, static_cast<int64_t>(block.size()));
    batch.document_index.push_back(d->index);
  }
  const int64_t B = batch.B, S = batch.S, T = batch.T;
  batch.tokens.assign(B * S * T, kPadId);
  batch.lm_labels.assign(B * S * T, kIgnoreLabel);
  batch.block_mask.assign(B * S, 0);
  batch.K = masks ? masks->masked_blocks : 0;
  batch.masked_blocks.assign(B * batch.K, -1);

  for (int64_t b = 0; b < B; ++b) {
    const auto& doc_blocks = packed[b];
    const int64_t num_blocks = static_cast<int64_t>(doc_blocks.size());
    // Flat positions (into tokens) of this document's real tokens, [CLS] and [SEP] left out.
    std::vector<int64_t> positions;
    for (int64_t s = 0; s < num_blocks; ++s) {
      batch.block_mask[b * S + s] = 1;
      const auto& block = doc_blocks[s];
      std::copy(block.begin(), block.end(), batch.tokens.begin() + (b * S + s) * T);
      batch.real_tokens += static_cast<int64_t>(block.size());
      const int64_t words = static_cast<int64_t>(block.size()) - (blocks.separator ? 1 : 0);
      for (int64_t t = 1; t < words; ++t) positions.push_back((b * S + s) * T + t);
    }
    if (!masks || num_blocks == 0) continue;
    const uint64_t index = static_cast<uint64_t>(documents[b]->index);
    const uint64_t view = views.empty() ? 0 : views[b];

    MaskWords(*masks, view, epoch, index, positions, &batch.tokens, &batch.lm_labels);

    // Masked sentence-block prediction: K distinct real block positions.
    KeyedRandom block_draw(masks->seed, {kBlockMaskKey, view, static_cast<uint64_t>(epoch), index});
    const std::vector<int64_t> chosen = Sample(num_blocks, std::min(batch.K, num_blocks), &block_draw);
    for (size_t k = 0; k < chosen.size(); ++k) batch.masked_blocks[b * batch.K + static_cast<int64_t>(k)] = chosen[k];
  }
  return batch;
}

}  // namespace docmatch::data
