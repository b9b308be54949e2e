// DocSplit's views (Wang & Izbicki): each sentence of a document goes, by a
// fair coin keyed by (seed, epoch, document index), to one of two halves.
// The halves keep sentence order and the paragraph structure of the sentences
// they got; they are the positive pair of the contrastive loss.
#pragma once

#include <cstdint>
#include <utility>

#include "data/document.h"

namespace docmatch::data {

// Both halves keep the document's index and id. A half left empty by the
// coin takes one sentence from the other (a one-sentence document gives the
// same sentence twice), so both views always exist.
std::pair<Document, Document> SplitDocument(const Document& document, uint64_t seed, int64_t epoch);

}  // namespace docmatch::data
