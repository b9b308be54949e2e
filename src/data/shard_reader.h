// Reads one shard file (see shard_format.h): header checks on open, then
// ranges of documents with one hyperslab read per dataset.
//
// Opening validates what a wrong file would break later: that it is HDF5 at
// all (a truncated or foreign file is named in the error), that it carries the
// docmatch format name and a supported version, and that its offsets agree
// with its counts. Only the document offsets (documents + 1 integers) stay in
// memory; everything else is read per range.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/document.h"
#include "data/shard_format.h"
#include "data/shard_writer.h"

namespace docmatch::data {

// Sizes of one document, from the offsets alone.
struct DocumentLength {
  int64_t paragraphs = 0, sentences = 0, tokens = 0;
};

struct ShardHeader {
  int64_t format_version = 0;
  std::string tokenizer_hash;
  int64_t vocab_size = 0;
  ShardCounts counts;
};

class ShardReader {
 public:
  // Throws std::runtime_error naming `path` when the file is missing,
  // truncated, not HDF5, not a docmatch shard, or inconsistent.
  explicit ShardReader(std::string path);

  const std::string& path() const { return path_; }
  const ShardHeader& header() const { return header_; }
  int64_t num_documents() const { return header_.counts.documents; }

  // Documents [begin, end) of this shard; Document::index is the local index.
  std::vector<Document> Read(int64_t begin, int64_t end) const;
  // All ids of this shard, in order.
  std::vector<std::string> ReadIds() const;
  // Every document's sizes, reading offsets only (no tokens).
  std::vector<DocumentLength> ReadLengths() const;

 private:
  std::vector<int64_t> ReadInt64(const char* name, int64_t begin, int64_t count) const;
  std::vector<std::string> ReadStrings(const char* name, int64_t begin, int64_t count) const;

  std::string path_;
  shard_format::Handle file_;
  ShardHeader header_;
  std::vector<int64_t> document_offsets_;  // (documents + 1,)
};

}  // namespace docmatch::data
