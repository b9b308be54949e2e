// Helpers for the data tests: scratch folders and synthetic corpora written
// straight through ShardWriter (no tokenizer needed), with known contents.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/corpus/corpus.h"
#include "data/corpus/document.h"

namespace docmatch::data::testing {

// A fresh empty folder under the test temp dir, removed by the destructor.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name);
  ~ScratchDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Document `index` of a synthetic corpus: 1-4 paragraphs of 1-5 sentences of
// 1-12 tokens, ids "doc-<index>", tokens a function of (seed, index).
Document SyntheticDocument(int64_t index, uint64_t seed = 7);

// Appends `more`'s paragraphs, sentences and tokens to `document`.
void AppendDocument(Document* document, const Document& more);

// Writes shards of the given sizes (documents per shard) and a manifest into
// `directory`; document indices run across shards in order.
void WriteSyntheticCorpus(const std::string& directory, const std::vector<int64_t>& shard_sizes,
                          const std::string& tokenizer_hash = "0123456789abcdef", uint64_t seed = 7);

// `count` sentences of plain lower-case words with single spaces, ending in
// "." (SentencePiece's normalisation leaves them unchanged, so decoding gives
// them back exactly).
std::vector<std::string> SyntheticSentences(int count, uint64_t seed = 5);

// Writes `content` to `path`.
void WriteFile(const std::string& path, const std::string& content);

}  // namespace docmatch::data::testing
