// A prepared corpus: manifest.json, its shards and its tokenizer model, with
// random access to any document by index or by id.
//
// manifest.json is the corpus's table of contents, written last by `prepare`
// (so a corpus without one is incomplete): the shard files in order with their
// counts, the tokenizer file and hash, totals, and the prepare report. Opening
// a corpus opens every shard's header, so a missing, truncated or foreign
// shard, or one made with another tokenizer, is reported before any training.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/corpus/document.h"
#include "data/corpus/shard_reader.h"

namespace docmatch::data {

constexpr const char* kManifestFile = "manifest.json";
// Every document prepare read but did not write, {"id", "reason"} a line;
// absent when it skipped none.
constexpr const char* kSkippedFile = "skipped.jsonl";
constexpr const char* kTokenizerFile = "tokenizer.model";
constexpr int kManifestVersion = 1;

struct ShardEntry {
  std::string file;  // relative to the corpus directory, e.g. "shard-00003.h5"
  ShardCounts counts;
};

struct Manifest {
  std::string tokenizer_file = kTokenizerFile;
  std::string tokenizer_hash;
  int64_t vocab_size = 0;
  std::vector<ShardEntry> shards;
  ShardCounts totals;
  nlohmann::json report = nlohmann::json::object();  // what `prepare` counted and skipped

  nlohmann::json ToJson() const;
  static Manifest FromJson(const nlohmann::json& json, const std::string& origin);
  // Written through a temporary name, like shards.
  void Save(const std::string& directory) const;
  static Manifest Load(const std::string& directory);
};

class Corpus {
 public:
  // Throws std::runtime_error naming the directory or shard at fault.
  explicit Corpus(std::string directory);

  const std::string& directory() const { return directory_; }
  const Manifest& manifest() const { return manifest_; }
  std::string tokenizer_path() const;
  int64_t num_documents() const { return manifest_.totals.documents; }
  int num_shards() const { return static_cast<int>(readers_.size()); }
  const ShardReader& shard(int s) const { return *readers_[s]; }
  // First global index of shard s; shard_begin(num_shards()) == num_documents().
  int64_t shard_begin(int s) const { return shard_begins_[s]; }

  // (shard, local index) of global document `index`.
  std::pair<int, int64_t> Locate(int64_t index) const;
  Document Get(int64_t index) const;
  // Index of the document with this id; builds the id index on first use.
  std::optional<int64_t> IndexOf(const std::string& id) const;
  // Every document's id, in index order (read from the shards now).
  std::vector<std::string> Ids() const;
  // Why prepare left the document with this id out ("empty", "invalid_utf8";
  // kSkippedFile), or nothing when it did not.
  std::optional<std::string> SkippedByPrepare(const std::string& id) const;

 private:
  std::string directory_;
  Manifest manifest_;
  std::vector<std::unique_ptr<ShardReader>> readers_;
  std::vector<int64_t> shard_begins_;  // (shards + 1,)
  mutable std::once_flag id_index_once_;
  mutable std::unordered_map<std::string, int64_t> id_index_;
  mutable std::once_flag skipped_once_;
  mutable std::unordered_map<std::string, std::string> skipped_;  // id -> reason
};

}  // namespace docmatch::data
