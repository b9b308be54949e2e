// A corpus's words, kept beside its shards for lexical retrieval (BM25):
// each document's words as `prepare` segments them (ICU's word boundaries,
// UAX #29; lower-cased; punctuation and spaces left out), counted. The model's
// tokenizer plays no part, so the same words serve every model of the corpus.
//
//   words.h5
//     vocabulary_bytes    uint8 (bytes,) every word's UTF-8 one after another;
//                         id = its place, in order of first appearance
//     vocabulary_offsets  int64 (W + 1,) into vocabulary_bytes
//                         (fixed-size strings would pad every word to the
//                         longest; these stay under the chunks' checksums)
//     document_offsets  int64 (N + 1,) into term_ids / term_counts
//     term_ids          int32 (entries,) ascending within a document
//     term_counts       int32 (entries,) occurrences of the word in the document
//   attributes: docmatch_format = "docmatch-words", format_version,
//               num_documents, num_occurrences
//
// The writer appends document by document (memory: the vocabulary, not the
// corpus) and is closed before the manifest is written; a corpus prepared
// before docmatch kept words has no words.h5, and BM25 says to prepare it
// again.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/corpus/shard_format.h"

namespace docmatch::data {

constexpr const char* kWordsFile = "words.h5";
// Longer "words" (a run of hex digits, a base64 blob) are left out, as
// Lucene's analyzers bound a token (maxTokenLength 255).
constexpr size_t kMaxWordBytes = 255;

// One document's distinct words and how often each occurs.
using WordBag = std::vector<std::pair<std::string, int32_t>>;

class WordCountsWriter {
 public:
  // Creates `path` (replacing one there).
  explicit WordCountsWriter(std::string path);
  ~WordCountsWriter();
  // The next document of the corpus, in corpus order.
  void Add(const WordBag& words);
  // Writes the vocabulary and closes the file, checked (a full disk is named).
  void Close();
  int64_t vocabulary_size() const { return static_cast<int64_t>(vocabulary_.size()); }

 private:
  void Flush();

  std::string path_;
  shard_format::Handle file_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::string> vocabulary_;
  std::vector<int64_t> offsets_;  // buffered, flushed with the entries
  std::vector<int32_t> terms_, counts_;
  int64_t documents_ = 0, entries_ = 0, occurrences_ = 0;
  bool closed_ = false;
};

// A words.h5 read whole (its entries and vocabulary in memory).
class WordCounts {
 public:
  // Throws an error naming the file when it is missing, damaged or of
  // another corpus (its document count differs from `documents`).
  static WordCounts Load(const std::string& path, int64_t documents);
  // The corpus's words, or an error that says to prepare it again.
  static WordCounts OfCorpus(const std::string& corpus_directory, int64_t documents);

  int64_t num_documents() const { return static_cast<int64_t>(offsets_.size()) - 1; }
  int64_t vocabulary_size() const { return static_cast<int64_t>(vocabulary_.size()); }
  const std::string& word(int32_t id) const { return vocabulary_[id]; }
  // The id of `word`, if the corpus has it.
  std::optional<int32_t> Id(const std::string& word) const;
  // Document d's entries: [begin, end) into terms() and counts().
  int64_t begin(int64_t d) const { return offsets_[d]; }
  int64_t end(int64_t d) const { return offsets_[d + 1]; }
  const std::vector<int32_t>& terms() const { return terms_; }
  const std::vector<int32_t>& counts() const { return counts_; }
  // Words in document d (the sum of its counts).
  int64_t length(int64_t d) const { return lengths_[d]; }

 private:
  std::vector<std::string> vocabulary_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<int64_t> offsets_;
  std::vector<int32_t> terms_, counts_;
  std::vector<int64_t> lengths_;
};

}  // namespace docmatch::data
