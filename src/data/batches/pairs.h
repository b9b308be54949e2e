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

// Relevance judgements for ranking: query index -> (document index -> grade).
// A grade is an integer; a document is relevant at grade 1 or more (nDCG's
// gain is the grade), as trec_eval reads qrels; a query judged with grades
// below 1 only stays listed, with no relevant document. Read from any of:
//  * {"query": id, "relevant": [id, ...]} (grade 1 each) or
//    {"query": id, "relevant": {id: grade, ...}} JSONL lines;
//  * {"source": id, "target": id} lines (related.jsonl; a "label": 0 line is
//    skipped), grade 1;
//  * BEIR's qrels, `query-id<TAB>corpus-id<TAB>score` (a header line naming
//    the columns is skipped);
//  * TREC qrels, `query iteration document grade` (whitespace-separated).
// Unknown ids, a grade that is not an integer and a document judged twice
// with different grades are errors naming the file and line. A document
// prepare skipped (Corpus::SkippedByPrepare) is judged under a negative
// index, -1, -2, ...: relevant and never found, as trec_eval counts a
// relevant document missing from a run; a line whose query prepare skipped
// is left out. Both are warned of once. A query whose every relevant
// document prepare skipped has no relevant candidate: eval leaves it out
// of its means and of run.trec alike.
using Judgements = std::map<int64_t, int64_t>;
using Relevance = std::map<int64_t, Judgements>;
Relevance ReadRelevance(const std::string& path, const Corpus& corpus);
// The same with queries from their own corpus (eval --queries): a query id
// (or source) is looked up in `queries`, a relevant id (or target) in
// `candidates`.
Relevance ReadRelevance(const std::string& path, const Corpus& queries, const Corpus& candidates);
// The documents of one query's judgements that are relevant (grade >= 1)
// and in the corpus (index >= 0), in index order.
std::vector<int64_t> RelevantDocuments(const Judgements& judgements);

}  // namespace docmatch::data
