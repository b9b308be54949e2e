// Reading raw documents from JSONL or a folder of .txt files, one at a time,
// with errors that name the file and line (corpus_reader.h).
#include "data/text/corpus_reader.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "data/text/text.h"

namespace docmatch::data {
namespace fs = std::filesystem;

RawDocumentReader::RawDocumentReader(std::string input) : input_(std::move(input)) {
  if (!fs::exists(input_)) throw InputError("input '" + input_ + "' does not exist");
  is_directory_ = fs::is_directory(input_);
  if (is_directory_) {
    for (const auto& entry : fs::directory_iterator(input_)) {
      if (entry.is_regular_file() && entry.path().extension() == ".txt") files_.push_back(entry.path().string());
    }
    std::sort(files_.begin(), files_.end());
    if (files_.empty()) throw InputError("input folder '" + input_ + "' holds no .txt files");
  } else {
    jsonl_.open(input_, std::ios::binary);
    if (!jsonl_) throw InputError("cannot open input '" + input_ + "'");
  }
}

int64_t RawDocumentReader::CountDocuments() const {
  if (is_directory_) return static_cast<int64_t>(files_.size());
  std::ifstream in(input_, std::ios::binary);
  std::vector<char> buffer(1 << 20);
  int64_t lines = 0;
  char last = '\n';
  while (in.read(buffer.data(), buffer.size()) || in.gcount() > 0) {
    const auto n = in.gcount();
    lines += std::count(buffer.data(), buffer.data() + n, '\n');
    last = buffer[n - 1];
  }
  return lines + (last != '\n' ? 1 : 0);
}

bool RawDocumentReader::Next(RawDocument* document) {
  *document = RawDocument();
  if (is_directory_) {
    if (next_file_ == files_.size()) return false;
    const std::string& path = files_[next_file_++];
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("cannot read '" + path + "'");
    std::ostringstream bytes;
    bytes << in.rdbuf();
    document->text = bytes.str();
    document->id = fs::path(path).stem().string();
    document->origin = path;
    document->invalid_utf8 = CountInvalidUtf8(document->text);
    if (document->invalid_utf8 > 0) document->text = RepairUtf8(document->text);
    return true;
  }
  std::string line;
  while (std::getline(jsonl_, line)) {
    ++line_number_;
    const std::string origin = input_ + ":" + std::to_string(line_number_);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines between records
    const int invalid = CountInvalidUtf8(line);
    if (invalid > 0) line = RepairUtf8(line);
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(origin + ": not a JSON object (" + std::string(e.what()) + ")");
    }
    if (!record.is_object()) throw InputError(origin + ": expected a JSON object with \"id\" and \"text\"");
    const auto text = record.find("text");
    if (text == record.end() || !text->is_string()) {
      throw InputError(origin + ": missing string field \"text\"" +
                       (record.contains("id") ? " (document " + record["id"].dump() + ")" : std::string()));
    }
    auto id = record.find("id");
    if (id == record.end()) id = record.find("_id");  // BEIR's corpus and queries
    if (id == record.end() || !(id->is_string() || id->is_number_integer())) {
      throw InputError(origin + ": missing field \"id\" (a string or an integer; BEIR's \"_id\" also)");
    }
    document->id = id->is_string() ? id->get<std::string>() : id->dump();
    if (document->id.empty()) throw InputError(origin + ": empty \"id\"");
    if (document->id.find('\0') != std::string::npos) {
      // Stored ids are C strings (HDF5): "a\u0000b" would be kept as "a", and
      // two such ids would become one.
      throw InputError(origin + ": \"id\" " + nlohmann::json(document->id).dump() +
                       " holds a NUL character (\\u0000), which an id cannot keep; remove it");
    }
    document->text = text->get<std::string>();
    if (const auto title = record.find("title"); title != record.end() && title->is_string()) {
      document->title = title->get<std::string>();
    }
    document->origin = origin;
    document->line = line_number_;
    document->invalid_utf8 = invalid;
    return true;
  }
  return false;
}

}  // namespace docmatch::data
