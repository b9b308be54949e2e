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
#include <string>

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

}  // namespace docmatch::data
