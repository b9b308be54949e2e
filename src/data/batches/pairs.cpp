// Reading labelled pairs and relevance lists, every id checked against the
// corpus and every error naming the file and line (pairs.h).
#include "data/batches/pairs.h"

#include <glog/logging.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "data/text/corpus_reader.h"
#include "data/text/input_shapes.h"

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

Relevance ReadRelevance(const std::string& path, const Corpus& corpus) { return ReadRelevance(path, corpus, corpus); }

std::vector<int64_t> RelevantDocuments(const Judgements& judgements) {
  std::vector<int64_t> relevant;
  for (const auto& [document, grade] : judgements)
    if (grade >= 1 && document >= 0) relevant.push_back(document);
  return relevant;
}

Relevance ReadRelevance(const std::string& path, const Corpus& queries, const Corpus& candidates) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot open relevance file '" + path + "'");
  Relevance relevance;
  std::map<std::pair<int64_t, int64_t>, int64_t> line_of;  // where each judgement was read
  int64_t number = 0;
  std::string where;
  // Documents prepare skipped (kSkippedFile) are judged under indices -1,
  // -2, ...: relevant, and never among the candidates.
  std::map<std::string, int64_t> absent;
  int64_t skipped_query_lines = 0;
  const auto query_index = [&](const char* field, const std::string& id) -> std::optional<int64_t> {
    if (!queries.IndexOf(id) && queries.SkippedByPrepare(id)) {
      ++skipped_query_lines;
      return std::nullopt;
    }
    return IndexOf(field, id, queries, where);
  };
  const auto document_index = [&](const char* field, const std::string& id) {
    if (!candidates.IndexOf(id) && candidates.SkippedByPrepare(id)) {
      return absent.emplace(id, -1 - static_cast<int64_t>(absent.size())).first->second;
    }
    return IndexOf(field, id, candidates, where);
  };
  const auto judge = [&](int64_t query, int64_t document, int64_t grade) {
    const auto [entry, added] = relevance[query].emplace(document, grade);
    const auto [line, first] = line_of.emplace(std::make_pair(query, document), number);
    if (!added && entry->second != grade) {
      throw InputError(where + ": this query and document are judged " + std::to_string(grade) + " here and " +
                       std::to_string(entry->second) + " at " + path + ":" + std::to_string(line->second) +
                       "; a judgement has one grade");
    }
  };
  std::string line;
  bool qrels_header_allowed = true;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    where = path + ":" + std::to_string(number);
    if (line[line.find_first_not_of(" \t")] != '{') {  // BEIR or TREC qrels
      const std::optional<QrelsLine> judged = ParseQrelsLine(line, where, qrels_header_allowed);
      qrels_header_allowed = false;
      if (!judged) continue;
      const std::optional<int64_t> query = query_index("query", judged->query);
      if (query) judge(*query, document_index("document", judged->document), judged->grade);
      continue;
    }
    qrels_header_allowed = false;
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(where + ": not a JSON object (" + std::string(e.what()) + ")");
    }
    if (record.contains("query") && record.contains("relevant") && record["query"].is_string() &&
        (record["relevant"].is_array() || record["relevant"].is_object())) {
      const std::optional<int64_t> query = query_index("query", record["query"].get<std::string>());
      if (!query) continue;
      relevance[*query];  // listed even when nothing in it is relevant
      if (record["relevant"].is_object()) {
        for (const auto& [id, grade] : record["relevant"].items()) {
          if (!grade.is_number_integer()) throw InputError(where + ": the grade of \"" + id + "\" is not an integer");
          judge(*query, document_index("relevant", id), grade.get<int64_t>());
        }
        continue;
      }
      for (const auto& target : record["relevant"]) {
        if (!target.is_string()) throw InputError(where + ": \"relevant\" must list document ids");
        judge(*query, document_index("relevant", target.get<std::string>()), 1);
      }
    } else if (record.contains("source") && record.contains("target") && record["source"].is_string() &&
               record["target"].is_string()) {
      if (record.contains("label") && record["label"] == 0) continue;
      const std::optional<int64_t> query = query_index("source", record["source"].get<std::string>());
      if (query) judge(*query, document_index("target", record["target"].get<std::string>()), 1);
    } else {
      throw InputError(where +
                       ": expected {\"query\": id, \"relevant\": [ids] or {id: grade}}, {\"source\": id, \"target\": "
                       "id}, or a qrels line");
    }
  }
  if (!absent.empty()) {
    LOG(WARNING) << "[eval] " << path << " judges " << absent.size()
                 << (absent.size() == 1 ? " document" : " documents") << " that prepare skipped (listed in "
                 << candidates.directory() << "/" << kSkippedFile
                 << "): relevant ones count as not found, as trec_eval counts a relevant document missing from a run";
  }
  if (skipped_query_lines > 0) {
    LOG(WARNING) << "[eval] " << path << ": " << skipped_query_lines << " lines name queries that prepare skipped ("
                 << queries.directory() << "/" << kSkippedFile << "); they are left out";
  }
  const bool any = std::any_of(relevance.begin(), relevance.end(),
                               [](const auto& q) { return !RelevantDocuments(q.second).empty(); });
  if (!any) throw InputError("relevance file '" + path + "' holds no query with a relevant document");
  return relevance;
}

}  // namespace docmatch::data
