// BEIR folders and sentence-transformers pair files, recognised and turned
// into what prepare and finetune read (input_shapes.h).
#include "data/text/input_shapes.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

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

}  // namespace docmatch::data
