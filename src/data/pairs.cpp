#include "data/pairs.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>

#include "data/corpus_reader.h"

namespace docmatch::data {

std::vector<LabelledPair> ReadPairs(const std::string& path, const Corpus& corpus) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot open pair file '" + path + "'");
  std::vector<LabelledPair> pairs;
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
    auto index_of = [&](const char* field) {
      if (!record.contains(field) || !record[field].is_string()) {
        throw InputError(where + ": missing string field \"" + field + "\"");
      }
      const std::string id = record[field].get<std::string>();
      const auto index = corpus.IndexOf(id);
      if (!index) {
        throw InputError(where + ": " + field + " \"" + id + "\" is not a document of corpus '" + corpus.directory() +
                         "' (a pair file for another corpus, or a document prepare skipped?)");
      }
      return *index;
    };
    LabelledPair pair;
    pair.source = index_of("source");
    pair.target = index_of("target");
    if (!record.contains("label") || !record["label"].is_number() ||
        (record["label"].get<double>() != 0 && record["label"].get<double>() != 1)) {
      throw InputError(where + ": \"label\" must be 0 or 1");
    }
    pair.label = record["label"].get<float>();
    pairs.push_back(pair);
  }
  return pairs;
}

}  // namespace docmatch::data
