// BEIR folders and sentence-transformers pair files, recognised and turned
// into what prepare and finetune read (input_shapes.h).
#include "data/text/input_shapes.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "data/text/corpus_reader.h"
#include "data/text/text.h"

namespace docmatch::data {
namespace fs = std::filesystem;

InputShape DetectInputShape(const std::string& input) {
  if (fs::is_directory(input)) {
    if (fs::is_regular_file(fs::path(input) / "corpus.jsonl")) return InputShape::kBeir;
    if (fs::exists(fs::path(input) / "queries.jsonl") || fs::is_directory(fs::path(input) / "qrels")) {
      throw InputError("'" + input + "' looks like a BEIR dataset (queries.jsonl or qrels/) but has no corpus.jsonl");
    }
    return InputShape::kDocuments;
  }
  std::ifstream in(input);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json first = nlohmann::json::parse(RepairUtf8(line), nullptr, /*allow_exceptions=*/false);
    const bool pair =
        first.is_object() && first.contains("anchor") && first.contains("positive") && !first.contains("text");
    return pair ? InputShape::kTextPairs : InputShape::kDocuments;
  }
  return InputShape::kDocuments;
}

TextPairsImport ImportTextPairs(const std::string& pairs, const std::string& documents, const std::string& pair_file) {
  std::ifstream in(pairs);
  if (!in) throw InputError("cannot open pair file '" + pairs + "'");
  std::ofstream texts_out(documents, std::ios::binary), pairs_out(pair_file, std::ios::binary);
  if (!texts_out || !pairs_out) throw InputError("cannot write '" + documents + "' or '" + pair_file + "'");
  TextPairsImport report;
  std::unordered_map<std::string, std::string> id_of;  // text -> id
  const auto id = [&](const std::string& text) {
    const auto [entry, added] = id_of.emplace(text, "t" + std::to_string(id_of.size() + 1));
    if (added) texts_out << nlohmann::json{{"id", entry->second}, {"text", text}}.dump() << "\n";
    return entry->second;
  };
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = pairs + ":" + std::to_string(number);
    if (CountInvalidUtf8(line) > 0) {
      line = RepairUtf8(line);
      ++report.repaired_utf8;
    }
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(where + ": not a JSON object (" + std::string(e.what()) + ")");
    }
    for (const char* field : {"anchor", "positive"}) {
      if (!record.is_object() || !record.contains(field) || !record[field].is_string()) {
        throw InputError(where + ": a pair line needs string \"anchor\" and \"positive\" (and may have \"negative\")");
      }
    }
    if (record.contains("negative") && !record["negative"].is_string()) {
      throw InputError(where + ": \"negative\" must be a text");
    }
    // prepare skips an empty document, which would leave its pairs naming nothing.
    for (const char* field : {"anchor", "positive", "negative"}) {
      if (record.contains(field) &&
          record[field].get<std::string>().find_first_not_of(" \t\r\n") == std::string::npos) {
        throw InputError(where + ": \"" + field + "\" is empty: a pair needs two texts to relate");
      }
    }
    ++report.lines;
    const std::string anchor = id(record["anchor"].get<std::string>());
    pairs_out << nlohmann::json{{"source", anchor}, {"target", id(record["positive"].get<std::string>())}, {"label", 1}}
                     .dump()
              << "\n";
    ++report.positives;
    if (record.contains("negative")) {
      pairs_out << nlohmann::json{{"source", anchor},
                                  {"target", id(record["negative"].get<std::string>())},
                                  {"label", 0}}
                       .dump()
                << "\n";
      ++report.negatives;
    }
  }
  if (report.lines == 0) throw InputError("pair file '" + pairs + "' holds no pairs");
  texts_out.close();
  pairs_out.close();
  if (!texts_out || !pairs_out) throw InputError("could not finish writing '" + documents + "' or '" + pair_file + "'");
  report.texts = static_cast<int64_t>(id_of.size());
  return report;
}

std::optional<QrelsLine> ParseQrelsLine(std::string line, const std::string& where, bool header_allowed) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  std::vector<std::string> parts;
  std::istringstream fields(line);
  if (line.find('\t') != std::string::npos) {
    for (std::string part; std::getline(fields, part, '\t');) parts.push_back(part);
    while (!parts.empty() && parts.back().empty()) parts.pop_back();
  } else {
    for (std::string part; fields >> part;) parts.push_back(part);
  }
  if (header_allowed && parts.size() == 3 && parts[2] == "score") return std::nullopt;
  if (parts.size() != 3 && parts.size() != 4) {
    throw InputError(where + ": expected BEIR's `query-id<TAB>corpus-id<TAB>score` or TREC's `query iteration "
                             "document grade`, not " +
                     std::to_string(parts.size()) + " fields");
  }
  size_t used = 0;
  int64_t grade = 0;
  try {
    grade = std::stoll(parts.back(), &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != parts.back().size()) {
    throw InputError(where + ": the grade \"" + parts.back() +
                     "\" is not an integer (qrels grade 0 not relevant, 1 or more relevant)");
  }
  return QrelsLine{parts[0], parts[parts.size() - 2], grade};
}

namespace {

bool Blank(const std::string& text) { return text.find_first_not_of(" \t\r\n") == std::string::npos; }

// Calls `each(document)` for every document of the JSONL `path` whose id is a key of `wanted`.
template <typename Each>
void ForWantedDocuments(const std::string& path, const std::unordered_map<std::string, bool>& wanted, Each each) {
  RawDocumentReader reader(path);
  RawDocument document;
  while (reader.Next(&document))
    if (wanted.count(document.id)) each(document);
}

}  // namespace

BeirTrainingImport ImportBeirTraining(const std::string& folder, std::vector<QrelsSplit> splits,
                                      const std::string& documents) {
  struct Judgement {
    QrelsLine judged;
    std::string where;
    size_t split = 0;
  };
  std::vector<Judgement> judgements;
  std::unordered_map<std::string, bool> queries_wanted, documents_wanted;  // id -> written yet
  for (size_t s = 0; s < splits.size(); ++s) {
    std::ifstream in(splits[s].qrels);
    if (!in) throw InputError("cannot open '" + splits[s].qrels + "'");
    std::string line;
    int64_t number = 0;
    bool first = true;
    while (std::getline(in, line)) {
      ++number;
      if (Blank(line)) continue;
      const std::string where = splits[s].qrels + ":" + std::to_string(number);
      const std::optional<QrelsLine> judged = ParseQrelsLine(line, where, first);
      first = false;
      if (!judged) continue;
      queries_wanted[judged->query] = false;
      documents_wanted[judged->document] = false;
      judgements.push_back({*judged, where, s});
    }
  }
  const fs::path beir(folder);
  std::unordered_map<std::string, RawDocument> query_text, document_text;
  ForWantedDocuments((beir / "queries.jsonl").string(), queries_wanted,
                     [&](const RawDocument& query) { query_text[query.id] = query; });
  ForWantedDocuments((beir / "corpus.jsonl").string(), documents_wanted,
                     [&](const RawDocument& document) { document_text[document.id] = document; });
  std::ofstream texts_out(documents, std::ios::binary);
  std::vector<std::ofstream> pairs_out;
  for (const QrelsSplit& split : splits) pairs_out.emplace_back(split.pairs, std::ios::binary);
  BeirTrainingImport report;
  for (const Judgement& j : judgements) {
    const auto query = query_text.find(j.judged.query);
    const auto document = document_text.find(j.judged.document);
    if (query == query_text.end()) {
      throw InputError(j.where + ": query \"" + j.judged.query + "\" is not in queries.jsonl");
    }
    if (document == document_text.end()) {
      throw InputError(j.where + ": document \"" + j.judged.document + "\" is not in corpus.jsonl");
    }
    const std::string source = "query:" + j.judged.query;
    if (!queries_wanted[j.judged.query]) {
      queries_wanted[j.judged.query] = true;
      texts_out << nlohmann::json{{"id", source}, {"text", query->second.text}}.dump() << "\n";
      ++report.queries;
    }
    if (!documents_wanted[j.judged.document]) {
      documents_wanted[j.judged.document] = true;
      texts_out << nlohmann::json{{"id", j.judged.document},
                                  {"title", document->second.title},
                                  {"text", document->second.text}}
                       .dump()
                << "\n";
      ++report.documents;
    }
    pairs_out[j.split] << nlohmann::json{{"source", source},
                                         {"target", j.judged.document},
                                         {"label", j.judged.grade >= 1 ? 1 : 0}}
                              .dump()
                       << "\n";
  }
  texts_out.close();
  for (auto& out : pairs_out) out.close();
  if (!texts_out || std::any_of(pairs_out.begin(), pairs_out.end(), [](const auto& out) { return !out; })) {
    throw InputError("could not write '" + documents + "' or the pair files beside it");
  }
  report.splits = std::move(splits);
  return report;
}

PairsKept KeepPairsOfCorpus(const std::string& pairs, const Corpus& corpus, const std::string& kept) {
  std::ifstream in(pairs);
  std::ofstream out(kept, std::ios::binary);
  if (!in || !out) throw InputError("cannot read '" + pairs + "' or write '" + kept + "'");
  PairsKept counts;
  std::string line;
  while (std::getline(in, line)) {
    if (Blank(line)) continue;
    const nlohmann::json pair = nlohmann::json::parse(line);
    if (!corpus.IndexOf(pair.at("source").get<std::string>()) || !corpus.IndexOf(pair.at("target").get<std::string>())) {
      ++counts.left_out;
      continue;
    }
    out << line << "\n";
    ++(pair.at("label").get<int>() == 1 ? counts.positives : counts.negatives);
  }
  out.close();
  if (!out) throw InputError("could not write '" + kept + "'");
  return counts;
}

}  // namespace docmatch::data
