// Writes one shard file (see shard_format.h).
//
// Documents are buffered in memory until Close(), which writes everything to
// "<path>.tmp" and renames it to <path> only when complete: a crash or an
// exception never leaves a file that looks like a finished shard, and a
// writer destroyed without Close() removes its temporary file. Memory is
// bounded by the shard size (documents per shard), not the corpus.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/corpus/document.h"

namespace docmatch::data {

struct ShardCounts {
  int64_t documents = 0;
  int64_t paragraphs = 0;
  int64_t sentences = 0;
  int64_t tokens = 0;
};

class ShardWriter {
 public:
  ShardWriter(std::string path, std::string tokenizer_hash, int vocab_size);
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  ~ShardWriter();

  // Appends a document; its offsets are relative to itself (document.h).
  void Add(const Document& document);
  // Writes the shard and renames it into place. Throws with the path on error.
  ShardCounts Close();

  const ShardCounts& counts() const { return counts_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string tokenizer_hash_;
  int vocab_size_;
  bool closed_ = false;
  ShardCounts counts_;
  std::vector<int32_t> tokens_;
  std::vector<int64_t> sentence_offsets_{0};
  std::vector<int64_t> paragraph_offsets_{0};
  std::vector<int64_t> document_offsets_{0};
  std::vector<std::string> ids_;
  std::vector<std::string> titles_;
};

}  // namespace docmatch::data
