// Reads one shard file (see shard_format.h): header checks on open, then
// ranges of documents with one hyperslab read per dataset.
//
// Opening validates what a wrong file would break later: that it is HDF5 at
// all (a truncated or foreign file is named in the error), that it carries the
// docmatch format name and a supported version, and that its offsets agree
// with its counts. Only the document offsets (documents + 1 integers) stay in
// memory; everything else is read per range.
//
// Open files are bounded process-wide: HDF5 keeps about half a megabyte of
// state per open file, so a 700K-document corpus of 342 shards held open would
// cost its reader memory in proportion to the corpus. At most
// MaxOpenShards() files are open at once (least recently used closed first;
// DOCMATCH_MAX_OPEN_SHARDS, default 8); a reader reopens its file when it
// reads again. A read in progress keeps its file open until it returns.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/corpus/document.h"
#include "data/corpus/shard_format.h"
#include "data/corpus/shard_writer.h"

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
  ~ShardReader();
  ShardReader(ShardReader&& other) noexcept;
  ShardReader& operator=(ShardReader&& other) noexcept;

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
  // This shard's file, opened again if the open-file bound closed it.
  std::shared_ptr<const shard_format::Handle> File() const;
  std::vector<int64_t> ReadInt64(hid_t file, const char* name, int64_t begin, int64_t count) const;
  std::vector<std::string> ReadStrings(hid_t file, const char* name, int64_t begin, int64_t count) const;

  std::string path_;
  uint64_t key_ = 0;  // this reader in the open-file bound
  ShardHeader header_;
  std::vector<int64_t> document_offsets_;  // (documents + 1,)
};

// The process-wide bound on open shard files, and how many are open now.
size_t MaxOpenShards();
size_t OpenShardFiles();

}  // namespace docmatch::data
