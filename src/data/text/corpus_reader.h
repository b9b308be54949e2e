// Raw input documents for `prepare`: a JSONL file (one {"id", "text",
// optional "title"} object a line) or a folder of .txt files (file name
// without ".txt" = id), read one document at a time in a fixed order.
//
// A line that is not a JSON object, or has no string "text" or "id", is an
// InputError naming the file and line: those are mistakes in the input that a
// user must fix, not documents to drop silently. Invalid UTF-8 is not an
// error here: the bytes are repaired (U+FFFD) so JSON can parse them, and the
// count of bad sequences travels with the document for `prepare`'s policy.
#pragma once

#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace docmatch::data {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RawDocument {
  std::string id;
  std::string title;
  std::string text;
  std::string origin;    // "file:line" or the file's path, for messages
  int64_t line = 0;      // JSONL line number (0 for a folder's files)
  int invalid_utf8 = 0;  // ill-formed sequences repaired in the raw bytes
};

class RawDocumentReader {
 public:
  // `input`: a JSONL file or a directory of .txt files.
  explicit RawDocumentReader(std::string input);

  // Fills `document` and returns true, or returns false at the end.
  bool Next(RawDocument* document);

  // Documents in the input (lines for JSONL, files for a folder): one fast
  // pass, for the progress bar's ETA.
  int64_t CountDocuments() const;
  bool is_directory() const { return is_directory_; }

 private:
  std::string input_;
  bool is_directory_ = false;
  std::vector<std::string> files_;  // folder input, sorted
  size_t next_file_ = 0;
  std::ifstream jsonl_;
  int64_t line_number_ = 0;
};

}  // namespace docmatch::data
