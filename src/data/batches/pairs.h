// Labelled document pairs (fine-tuning and pair classification): JSONL lines
// {"source": id, "target": id, "label": 0 or 1}, ids from the corpus.
// Unknown ids, a missing field or a label other than 0/1 are errors naming
// the file, the line and the id: a pair file for another corpus must not
// train on silently dropped pairs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/corpus/corpus.h"

namespace docmatch::data {

struct LabelledPair {
  int64_t source = 0, target = 0;  // corpus indices
  float label = 0;                 // 1 related, 0 not
};

// With `labels_required` false (relevance lists such as related.jsonl), a
// line without "label" is a related pair (label 1). A pair given both labels
// (in either order) is an error naming both lines, and so is a file whose
// every pair puts a document with itself.
std::vector<LabelledPair> ReadPairs(const std::string& path, const Corpus& corpus, bool labels_required = true);

// Relevance lists for ranking, either {"query": id, "relevant": [id, ...]}
// (Wikispeedia's relevance.jsonl) or {"source": id, "target": id} lines
// (related.jsonl; a "label": 0 line is skipped): query index -> relevant
// indices. Unknown ids are errors naming the file and line.
std::map<int64_t, std::vector<int64_t>> ReadRelevance(const std::string& path, const Corpus& corpus);
// The same with queries from their own corpus (eval --queries): a query id
// (or source) is looked up in `queries`, a relevant id (or target) in
// `candidates`.
std::map<int64_t, std::vector<int64_t>> ReadRelevance(const std::string& path, const Corpus& queries,
                                                      const Corpus& candidates);

}  // namespace docmatch::data
