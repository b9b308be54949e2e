// DocSplit's views (Wang & Izbicki): each sentence of a document goes, by a
// fair coin keyed by (seed, epoch, document index), to one of two halves.
// The halves keep sentence order and the paragraph structure of the sentences
// they got; they are the positive pair of the contrastive loss.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "data/batches/blocks.h"
#include "data/batches/flat_batch.h"
#include "data/corpus/document.h"

namespace docmatch::data {

// Both halves keep the document's index and id. A half left empty by the
// coin takes one sentence from the other (a one-sentence document gives the
// same sentence twice), so both views always exist.
std::pair<Document, Document> SplitDocument(const Document& document, uint64_t seed, int64_t epoch);

// The DocSplit batch of B documents: 2B views, every document's first half
// then every second half (view i's partner is i + B), each half drawing its
// LM masks from its own stream, or unmasked when `masks` is null. `seed`
// keys the split.
BlockBatch BuildDocSplitBatch(const std::vector<const Document*>& documents, const BlockOptions& blocks,
                              const MaskOptions* masks, uint64_t seed, int64_t epoch);
// The same views as flat rows for MatchBERT (documents = 2B, view i's partner
// i + B), with the word LM's masks when `masks` is given (one stream per
// half), unmasked otherwise.
FlatBatch BuildFlatDocSplitBatch(const std::vector<const Document*>& documents, const FlatOptions& flat,
                                 const MaskOptions* masks, uint64_t seed, int64_t epoch);

}  // namespace docmatch::data
