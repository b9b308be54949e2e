// DocSplit's coin per sentence, the fix-up that keeps both halves non-empty, and
// the 2B-view batch built from the halves (docsplit.h).
#include "data/batches/docsplit.h"

#include <glog/logging.h>

#include <stdexcept>
#include <tuple>
#include <vector>

#include "console/error.h"
#include "data/corpus/random.h"

namespace docmatch::data {
namespace {

constexpr uint64_t kSplitKey = 0x646f6373706c6974ULL;  // "docsplit"

// The sentences with `keep[s]` set, paragraphs kept where they have any.
Document Subset(const Document& d, const std::vector<bool>& keep) {
  Document out;
  out.index = d.index;
  out.id = d.id;
  out.title = d.title;
  out.sentence_offsets = {0};
  out.paragraph_offsets = {0};
  for (int64_t p = 0; p < d.num_paragraphs(); ++p) {
    for (int64_t s = d.paragraph_offsets[p]; s < d.paragraph_offsets[p + 1]; ++s) {
      if (!keep[s]) continue;
      out.tokens.insert(out.tokens.end(), d.tokens.begin() + d.sentence_offsets[s],
                        d.tokens.begin() + d.sentence_offsets[s + 1]);
      out.sentence_offsets.push_back(out.num_tokens());
    }
    if (out.num_sentences() > out.paragraph_offsets.back()) out.paragraph_offsets.push_back(out.num_sentences());
  }
  return out;
}

}  // namespace

std::pair<Document, Document> SplitDocument(const Document& document, uint64_t seed, int64_t epoch) {
  const int64_t n = document.num_sentences();
  if (n == 0) throw Error("data", "DocSplit: document '" + document.id + "' has no sentences");
  KeyedRandom coin(seed, {kSplitKey, static_cast<uint64_t>(epoch), static_cast<uint64_t>(document.index)});
  std::vector<bool> first(n);
  int64_t in_first = 0;
  for (int64_t s = 0; s < n; ++s) in_first += (first[s] = coin.Next() >> 63);
  if (n == 1) return {document, document};
  if (in_first == 0) first[coin.Below(n)] = true;  // an empty half borrows one sentence
  if (in_first == n) first[coin.Below(n)] = false;
  std::vector<bool> second(n);
  for (int64_t s = 0; s < n; ++s) second[s] = !first[s];
  return {Subset(document, first), Subset(document, second)};
}

namespace {

// The 2B views of B documents: every first half, then every second half.
std::vector<Document> SplitDocuments(const std::vector<const Document*>& documents, uint64_t seed, int64_t epoch) {
  const size_t B = documents.size();
  std::vector<Document> halves(2 * B);
  for (size_t i = 0; i < B; ++i) std::tie(halves[i], halves[B + i]) = SplitDocument(*documents[i], seed, epoch);
  return halves;
}

// Pointers to the halves and their view numbers (0 for first halves, 1 for second).
std::pair<std::vector<const Document*>, std::vector<uint64_t>> Views(const std::vector<Document>& halves) {
  std::vector<const Document*> views;
  for (const Document& half : halves) views.push_back(&half);
  std::vector<uint64_t> numbers(halves.size() / 2, 0);
  numbers.resize(halves.size(), 1);
  return {views, numbers};
}

}  // namespace

BlockBatch BuildDocSplitBatch(const std::vector<const Document*>& documents, const BlockOptions& blocks,
                              const MaskOptions* masks, uint64_t seed, int64_t epoch) {
  const std::vector<Document> halves = SplitDocuments(documents, seed, epoch);
  const auto [views, numbers] = Views(halves);
  return BuildBlockBatch(views, blocks, masks, epoch, numbers);
}

FlatBatch BuildFlatDocSplitBatch(const std::vector<const Document*>& documents, const FlatOptions& flat,
                                 const MaskOptions* masks, uint64_t seed, int64_t epoch) {
  const std::vector<Document> halves = SplitDocuments(documents, seed, epoch);
  const auto [views, numbers] = Views(halves);
  return masks ? BuildFlatBatch(views, flat, *masks, epoch, numbers) : BuildFlatBatch(views, flat);
}

}  // namespace docmatch::data
