// manifest.json read and written, every shard's header checked on open, and
// documents fetched by index or id (corpus.h).
#include "data/corpus/corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "console/error.h"
#include "files/file_writer.h"

namespace docmatch::data {
namespace fs = std::filesystem;

nlohmann::json Manifest::ToJson() const {
  auto counts_json = [](const ShardCounts& c) {
    return nlohmann::json{
        {"documents", c.documents}, {"paragraphs", c.paragraphs}, {"sentences", c.sentences}, {"tokens", c.tokens}};
  };
  nlohmann::json shards_json = nlohmann::json::array();
  for (const auto& shard : shards) {
    nlohmann::json entry = counts_json(shard.counts);
    entry["file"] = shard.file;
    shards_json.push_back(entry);
  }
  return {{"format", "docmatch-corpus"},
          {"format_version", kManifestVersion},
          {"tokenizer", {{"file", tokenizer_file}, {"hash", tokenizer_hash}, {"vocab_size", vocab_size}}},
          {"totals", counts_json(totals)},
          {"shards", shards_json},
          {"report", report}};
}

Manifest Manifest::FromJson(const nlohmann::json& json, const std::string& origin) {
  try {
    if (json.value("format", "") != "docmatch-corpus") {
      throw std::runtime_error("not a docmatch corpus manifest (no \"format\": \"docmatch-corpus\")");
    }
    if (json.at("format_version").get<int>() != kManifestVersion) {
      throw std::runtime_error("manifest format version " + json.at("format_version").dump() +
                               ", this docmatch reads version " + std::to_string(kManifestVersion));
    }
    auto counts_from = [](const nlohmann::json& j) {
      return ShardCounts{j.at("documents").get<int64_t>(), j.at("paragraphs").get<int64_t>(),
                         j.at("sentences").get<int64_t>(), j.at("tokens").get<int64_t>()};
    };
    Manifest m;
    m.tokenizer_file = json.at("tokenizer").at("file").get<std::string>();
    m.tokenizer_hash = json.at("tokenizer").at("hash").get<std::string>();
    m.vocab_size = json.at("tokenizer").at("vocab_size").get<int64_t>();
    m.totals = counts_from(json.at("totals"));
    for (const auto& entry : json.at("shards"))
      m.shards.push_back({entry.at("file").get<std::string>(), counts_from(entry)});
    m.report = json.value("report", nlohmann::json::object());
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw Error("data", "manifest '" + origin + "' is malformed: " + e.what());
  } catch (const std::runtime_error& e) {
    throw Error("data", "manifest '" + origin + "': " + e.what());
  }
}

void Manifest::Save(const std::string& directory) const {
  const fs::path path = fs::path(directory) / kManifestFile;
  files::ReplaceFile(path.string(), ToJson().dump(2) + "\n");
}

Manifest Manifest::Load(const std::string& directory) {
  const fs::path path = fs::path(directory) / kManifestFile;
  std::ifstream in(path);
  if (!in) {
    throw Error("data", "'" + directory + "' is not a prepared corpus: no " + kManifestFile +
                            " (run `docmatch prepare --input ... --output " + directory + "`)");
  }
  nlohmann::json json;
  try {
    in >> json;
  } catch (const nlohmann::json::exception& e) {
    throw Error("data", "manifest '" + path.string() + "' is not valid JSON: " + e.what());
  }
  return FromJson(json, path.string());
}

Corpus::Corpus(std::string directory) : directory_(std::move(directory)), manifest_(Manifest::Load(directory_)) {
  shard_begins_.push_back(0);
  for (const auto& entry : manifest_.shards) {
    auto reader = std::make_unique<ShardReader>((fs::path(directory_) / entry.file).string());
    const ShardHeader& header = reader->header();
    if (header.tokenizer_hash != manifest_.tokenizer_hash) {
      throw Error("data", "shard '" + reader->path() + "' was tokenized with tokenizer " + header.tokenizer_hash +
                              ", the corpus manifest names " + manifest_.tokenizer_hash +
                              ": shards from different `prepare` runs are mixed");
    }
    if (header.counts.documents != entry.counts.documents || header.counts.tokens != entry.counts.tokens) {
      throw Error("data", "shard '" + reader->path() + "' holds " + std::to_string(header.counts.documents) +
                              " documents / " + std::to_string(header.counts.tokens) + " tokens, the manifest says " +
                              std::to_string(entry.counts.documents) + " / " + std::to_string(entry.counts.tokens));
    }
    shard_begins_.push_back(shard_begins_.back() + header.counts.documents);
    readers_.push_back(std::move(reader));
  }
  if (shard_begins_.back() != manifest_.totals.documents) {
    throw Error("data", "corpus '" + directory_ + "': shards hold " + std::to_string(shard_begins_.back()) +
                            " documents, the manifest's total is " + std::to_string(manifest_.totals.documents));
  }
}

std::string Corpus::tokenizer_path() const { return (fs::path(directory_) / manifest_.tokenizer_file).string(); }

std::pair<int, int64_t> Corpus::Locate(int64_t index) const {
  if (index < 0 || index >= num_documents()) {
    throw std::out_of_range("[data] document index " + std::to_string(index) + " outside 0.." +
                            std::to_string(num_documents() - 1) + " of corpus '" + directory_ + "'");
  }
  const auto it = std::upper_bound(shard_begins_.begin(), shard_begins_.end(), index);
  const int shard = static_cast<int>(it - shard_begins_.begin()) - 1;
  return {shard, index - shard_begins_[shard]};
}

Document Corpus::Get(int64_t index) const {
  const auto [shard, local] = Locate(index);
  Document document = std::move(readers_[shard]->Read(local, local + 1).front());
  document.index = index;
  return document;
}

std::optional<int64_t> Corpus::IndexOf(const std::string& id) const {
  std::call_once(id_index_once_, [this] {
    id_index_.reserve(num_documents());
    for (int s = 0; s < num_shards(); ++s) {
      const std::vector<std::string> ids = readers_[s]->ReadIds();
      for (size_t i = 0; i < ids.size(); ++i) id_index_.emplace(ids[i], shard_begins_[s] + static_cast<int64_t>(i));
    }
  });
  const auto it = id_index_.find(id);
  if (it == id_index_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> Corpus::Ids() const {
  std::vector<std::string> ids;
  ids.reserve(num_documents());
  for (const auto& reader : readers_) {
    const std::vector<std::string> shard = reader->ReadIds();
    ids.insert(ids.end(), shard.begin(), shard.end());
  }
  return ids;
}

std::optional<std::string> Corpus::SkippedByPrepare(const std::string& id) const {
  std::call_once(skipped_once_, [this] {
    const fs::path path = fs::path(directory_) / kSkippedFile;
    std::ifstream in(path);
    std::string line;
    while (in && std::getline(in, line)) {
      const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (record.is_object() && record.contains("id") && record["id"].is_string()) {
        skipped_.emplace(record["id"].get<std::string>(), record.value("reason", std::string("skipped")));
      }
    }
  });
  const auto it = skipped_.find(id);
  if (it == skipped_.end()) return std::nullopt;
  return it->second;
}

}  // namespace docmatch::data
