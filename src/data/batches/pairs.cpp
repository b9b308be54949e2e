// Reading labelled pairs and relevance lists, every id checked against the
// corpus and every error naming the file and line (pairs.h).
#include "data/batches/pairs.h"

#include <glog/logging.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "data/text/corpus_reader.h"

namespace docmatch::data {
namespace {

// The corpus index of the document named by string `field` of `record`.
int64_t IndexOf(const char* field, const std::string& id_value, const Corpus& corpus, const std::string& where) {
  const auto index = corpus.IndexOf(id_value);
  if (!index) {
    throw InputError(where + ": " + field + " \"" + id_value + "\" is not a document of corpus '" + corpus.directory() +
                     "' (a file for another corpus, or a document prepare skipped?)");
  }
  return *index;
}

// Calls `each(record, where, line)` for every non-blank JSONL line (where =
// "path:line").
template <typename Each>
void ForEachRecord(const std::string& path, const char* what, Each each) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot open " + std::string(what) + " file '" + path + "'");
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(where + ": not a JSON object (" + std::string(e.what()) + ")");
    }
    each(record, where, number);
  }
}

std::string Label(float label) { return label == 0 ? "0" : "1"; }

}  // namespace

std::vector<LabelledPair> ReadPairs(const std::string& path, const Corpus& corpus, bool labels_required) {
  std::vector<LabelledPair> pairs;
  std::map<std::pair<int64_t, int64_t>, std::pair<float, int64_t>> labels;  // label and line of each pair
  ForEachRecord(path, "pair", [&](const nlohmann::json& record, const std::string& where, int64_t line) {
    auto index_of = [&](const char* field) {
      if (!record.contains(field) || !record[field].is_string()) {
        throw InputError(where + ": missing string field \"" + field + "\"");
      }
      return IndexOf(field, record[field].get<std::string>(), corpus, where);
    };
    LabelledPair pair;
    pair.source = index_of("source");
    pair.target = index_of("target");
    if (!labels_required && !record.contains("label")) {
      pair.label = 1;
      pairs.push_back(pair);
      return;
    }
    if (!record.contains("label") || !record["label"].is_number() ||
        (record["label"].get<double>() != 0 && record["label"].get<double>() != 1)) {
      throw InputError(where + ": \"label\" must be 0 or 1");
    }
    pair.label = record["label"].get<float>();
    // A pair (either order: matching is symmetric) given both labels
    // teaches nothing and hides a mistake in the file.
    const auto key = std::minmax(pair.source, pair.target);
    const auto [first, added] = labels.emplace(key, std::make_pair(pair.label, line));
    if (!added && first->second.first != pair.label) {
      throw InputError(where + ": \"" + record["source"].get<std::string>() + "\" and \"" +
                       record["target"].get<std::string>() + "\" are labelled " + Label(pair.label) + " here and " +
                       Label(first->second.first) + " at " + path + ":" + std::to_string(first->second.second) +
                       "; a pair has one label");
    }
    pairs.push_back(pair);
  });
  if (pairs.empty()) throw InputError("pair file '" + path + "' holds no pairs");
  const auto self =
      std::count_if(pairs.begin(), pairs.end(), [](const LabelledPair& p) { return p.source == p.target; });
  if (self == static_cast<int64_t>(pairs.size())) {
    throw InputError("pair file '" + path + "': every pair (" + std::to_string(self) +
                     ") pairs a document with itself: nothing to learn or measure (source and target swapped into "
                     "one column?)");
  }
  const auto related = std::count_if(pairs.begin(), pairs.end(), [](const LabelledPair& p) { return p.label > 0.5f; });
  const auto self_related = std::count_if(pairs.begin(), pairs.end(),
                                          [](const LabelledPair& p) { return p.label > 0.5f && p.source == p.target; });
  if (related > 0 && self_related == related) {
    throw InputError("pair file '" + path + "': every related pair (label 1, " + std::to_string(related) +
                     " of them) pairs a document with itself, so no positive says which other document matches: "
                     "nothing to learn or measure (source and target swapped into one column?)");
  }
  if (self > 0) {
    LOG(WARNING) << "[data] " << path << ": " << self << " of " << pairs.size() << " pairs pair a document with itself";
  }
  return pairs;
}

std::map<int64_t, std::vector<int64_t>> ReadRelevance(const std::string& path, const Corpus& corpus) {
  return ReadRelevance(path, corpus, corpus);
}

std::map<int64_t, std::vector<int64_t>> ReadRelevance(const std::string& path, const Corpus& queries,
                                                      const Corpus& candidates) {
  const Corpus& corpus = candidates;
  std::map<int64_t, std::vector<int64_t>> relevant;
  ForEachRecord(path, "relevance", [&](const nlohmann::json& record, const std::string& where, int64_t) {
    if (record.contains("query") && record.contains("relevant") && record["query"].is_string() &&
        record["relevant"].is_array()) {
      const int64_t query = IndexOf("query", record["query"].get<std::string>(), queries, where);
      std::vector<int64_t>& list = relevant[query];
      for (const auto& target : record["relevant"]) {
        if (!target.is_string()) throw InputError(where + ": \"relevant\" must list document ids");
        list.push_back(IndexOf("relevant", target.get<std::string>(), corpus, where));
      }
    } else if (record.contains("source") && record.contains("target") && record["source"].is_string() &&
               record["target"].is_string()) {
      if (record.contains("label") && record["label"] == 0) return;
      relevant[IndexOf("source", record["source"].get<std::string>(), queries, where)].push_back(
          IndexOf("target", record["target"].get<std::string>(), corpus, where));
    } else {
      throw InputError(where + ": expected {\"query\": id, \"relevant\": [ids]} or {\"source\": id, \"target\": id}");
    }
  });
  const bool any = std::any_of(relevant.begin(), relevant.end(), [](const auto& q) { return !q.second.empty(); });
  if (!any) throw InputError("relevance file '" + path + "' holds no query with a relevant document");
  return relevant;
}

}  // namespace docmatch::data
