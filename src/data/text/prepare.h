// `docmatch prepare`: raw documents -> sentences (ICU) -> tokens
// (SentencePiece) -> HDF5 shards + manifest.json.
//
// Two passes when no tokenizer is given: the first segments the corpus and
// trains a SentencePiece model on its sentences (the trainer samples at most
// `tokenizer_sentences`), the second segments and encodes in parallel and
// writes shards in input order. Memory is bounded by the documents in flight
// and one shard's buffer, never by the corpus.
//
// Bad input loses nothing and is accounted for: invalid UTF-8 is repaired or
// the document skipped (policy), empty documents are skipped, documents over
// `max_document_tokens` are truncated; each count comes with sample ids. A
// duplicate id, or a JSONL line without "text", stops the run with the file
// and line. manifest.json is written last: without it a folder is not a corpus.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/corpus/shard_writer.h"
#include "data/corpus/word_counts.h"
#include "data/text/corpus_reader.h"
#include "data/text/text.h"
#include "data/text/tokenizer.h"

namespace docmatch::data {

enum class InvalidUtf8Policy { kRepair, kSkip };

struct PrepareOptions {
  std::string input;                    // JSONL file or folder of .txt files
  std::string output;                   // corpus folder, e.g. "corpora/wikispeedia"
  std::string tokenizer_model;          // "" = train one on the corpus
  TokenizerTrainingOptions tokenizer;   // vocabulary size etc. when training
  int64_t documents_per_shard = 2048;   // documents in each shard file
  int64_t max_document_tokens = 65536;  // longer documents are truncated (counted)
  InvalidUtf8Policy invalid_utf8 = InvalidUtf8Policy::kRepair;
  std::string locale = "en";  // ICU locale for sentence rules
  int threads = 0;            // 0 = all cores
  bool overwrite = false;     // replace an existing corpus in `output`
  bool title_in_text = false;  // a document's title is also its text's first paragraph (BEIR's corpora)
  bool progress = true;       // progress bars on stderr
};

struct PrepareReport {
  ShardCounts totals;
  int64_t input_documents = 0;
  int64_t shards = 0;
  int64_t bytes_on_disk = 0;
  int64_t vocab_size = 0;
  int64_t words = 0;  // distinct words of words.h5 (data/corpus/word_counts.h)
  bool tokenizer_trained = false;
  int64_t tokenizer_sentences = 0;
  double tokenizer_seconds = 0, encode_seconds = 0, total_seconds = 0;
  // reason -> (count, up to kSampleIds ids). Reasons: "empty", "invalid_utf8"
  // (skipped), "repaired_utf8", "truncated".
  struct Tally {
    int64_t count = 0;
    std::vector<std::string> sample_ids;
  };
  std::map<std::string, Tally> tallies;

  void Count(const std::string& reason, const std::string& id);
  nlohmann::json ToJson() const;
  std::string ToText() const;
};

PrepareReport Prepare(const PrepareOptions& options);

// One document's text segmented and tokenized exactly as Prepare does it
// (invalid UTF-8 repaired, paragraphs at blank lines, ICU sentences, cut at
// `max_tokens`), without building a corpus: `encode` and `search --text`.
class TextEncoder {
 public:
  TextEncoder(const Tokenizer& tokenizer, const std::string& locale = "en", int64_t max_tokens = 65536);
  // The document (no tokens when the text has none); `truncated`, when given,
  // says whether the cap cut it.
  Document Encode(RawDocument raw, bool* truncated = nullptr) const;
  // The same with the text's words counted as prepare keeps them (words.h5),
  // for BM25: into `words`.
  Document Encode(RawDocument raw, WordBag* words, bool* truncated = nullptr) const;

 private:
  const Tokenizer& tokenizer_;
  SentenceSegmenter segmenter_;
  WordSegmenter word_segmenter_;
  int64_t max_tokens_;
};

}  // namespace docmatch::data
