// Inputs `prepare` takes as users have them, beside its own JSONL
// ({"id", "text", "title"} a line) and folders of .txt files:
//
//  * a BEIR dataset folder: corpus.jsonl ({"_id", "title", "text"}),
//    queries.jsonl ({"_id", "text"}) and qrels/<split>.tsv (query-id,
//    corpus-id, score). The corpus is prepared with each title as its
//    document's first paragraph (as BEIR's dense models read "title text"),
//    the queries into a corpus of their own with the same tokenizer; eval
//    reads the qrels as they are (data/batches/pairs.h).
//  * sentence-transformers training pairs: JSONL lines {"anchor",
//    "positive"} with an optional "negative", the columns of
//    MultipleNegativesRankingLoss. Each distinct text becomes one document
//    (ids t1, t2, ... in order of first appearance) and each line the pairs
//    finetune reads: anchor-positive labelled 1, anchor-negative 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/corpus/corpus.h"

namespace docmatch::data {

enum class InputShape { kDocuments, kBeir, kTextPairs };

// The shape of `input` (a file or a folder); a folder holding queries.jsonl
// or qrels/ but no corpus.jsonl is an InputError naming what is missing.
InputShape DetectInputShape(const std::string& input);

struct TextPairsImport {
  int64_t lines = 0, texts = 0, positives = 0, negatives = 0;
  int64_t repaired_utf8 = 0;  // lines whose invalid bytes became U+FFFD
};

// Writes the distinct texts of the pairs file `pairs` as {"id", "text"}
// lines to `documents`, and the pairs as {"source", "target", "label"} lines
// to `pair_file`. A line without string "anchor" and "positive" (or with a
// "negative" that is not a string) is an InputError naming the file and line.
TextPairsImport ImportTextPairs(const std::string& pairs, const std::string& documents, const std::string& pair_file);

// One judgement of a qrels file: BEIR's `query-id<TAB>corpus-id<TAB>score`
// (an id may hold a space) or TREC's `query iteration document grade`
// (whitespace-separated).
struct QrelsLine {
  std::string query, document;
  int64_t grade = 0;
};

// The judgement on `line` (a trailing \r dropped), or nothing for BEIR's
// header line (its third column "score") when `header_allowed`. Another
// number of fields, or a grade that is not an integer, is an InputError
// naming `where` ("file:line").
std::optional<QrelsLine> ParseQrelsLine(std::string line, const std::string& where, bool header_allowed);

// A BEIR split's qrels (query-id, corpus-id, score) as finetune's pairs:
// {"source": "query:<query-id>", "target": <corpus-id>, "label"}, label 1
// at score 1 or more, 0 below.
struct QrelsSplit {
  std::string qrels, pairs;  // read, written
  bool validation = false;   // finetune's --valid-pairs (dev.tsv), else its --train-pairs
};

struct BeirTrainingImport {
  std::vector<QrelsSplit> splits;
  int64_t queries = 0, documents = 0;  // written to the documents file
};

// The training side of a BEIR folder: fine-tuning pairs lie in one corpus, so
// the queries and documents that `splits`' qrels judge are written to
// `documents` ({"id", "title", "text"} lines, query ids prefixed "query:"
// so that they cannot meet a document's) for prepare --title-in-text, and
// each split's pairs to its pairs file. An id missing from queries.jsonl or
// corpus.jsonl is an InputError naming the qrels line. An empty text is
// written too: prepare skips it, and KeepPairsOfCorpus then leaves out its
// pairs.
BeirTrainingImport ImportBeirTraining(const std::string& folder, std::vector<QrelsSplit> splits,
                                      const std::string& documents);

struct PairsKept {
  int64_t positives = 0, negatives = 0;
  int64_t left_out = 0;  // naming a document `corpus` lacks (one prepare skipped)
};

// The pairs of `pairs` ({"source", "target", "label"} lines) whose two
// documents are in `corpus`, written to `kept`.
PairsKept KeepPairsOfCorpus(const std::string& pairs, const Corpus& corpus, const std::string& kept);

}  // namespace docmatch::data
