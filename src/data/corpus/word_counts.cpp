// words.h5: writing it document by document, reading it whole (word_counts.h).
#include "data/corpus/word_counts.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>

#include "console/error.h"
#include "data/corpus/hdf5_util.h"

namespace docmatch::data {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "docmatch-words";
constexpr int64_t kVersion = 1;
constexpr hsize_t kChunkRows = 1 << 14;
constexpr size_t kFlushEntries = 1 << 20;

std::string Where(const std::string& path) { return "[data] words '" + path + "'"; }

}  // namespace

WordCountsWriter::WordCountsWriter(std::string path) : path_(std::move(path)) {
  const std::string where = Where(path_);
  file_ = hdf5::CreateFile(path_, where);
  hdf5::CreateArray(file_.get(), where, "document_offsets", H5T_NATIVE_INT64, {0}, kChunkRows);
  hdf5::CreateArray(file_.get(), where, "term_ids", H5T_NATIVE_INT32, {0}, kChunkRows);
  hdf5::CreateArray(file_.get(), where, "term_counts", H5T_NATIVE_INT32, {0}, kChunkRows);
  offsets_.push_back(0);
}

WordCountsWriter::~WordCountsWriter() {
  if (closed_) return;
  file_.Close();
  std::error_code ignored;
  fs::remove(path_, ignored);  // unfinished: no words file rather than a wrong one
}

void WordCountsWriter::Add(const WordBag& words) {
  std::vector<std::pair<int32_t, int32_t>> entries;
  entries.reserve(words.size());
  for (const auto& [word, count] : words) {
    const auto [it, added] = ids_.emplace(word, static_cast<int32_t>(vocabulary_.size()));
    if (added) vocabulary_.push_back(word);
    entries.emplace_back(it->second, count);
    occurrences_ += count;
  }
  std::sort(entries.begin(), entries.end());
  for (const auto& [term, count] : entries) {
    terms_.push_back(term);
    counts_.push_back(count);
  }
  entries_ += static_cast<int64_t>(entries.size());
  offsets_.push_back(entries_);
  ++documents_;
  if (terms_.size() >= kFlushEntries) Flush();
}

void WordCountsWriter::Flush() {
  const std::string where = Where(path_);
  hdf5::AppendRows(file_.get(), where, "document_offsets", H5T_NATIVE_INT64, static_cast<int64_t>(offsets_.size()),
                   offsets_.data());
  hdf5::AppendRows(file_.get(), where, "term_ids", H5T_NATIVE_INT32, static_cast<int64_t>(terms_.size()),
                   terms_.data());
  hdf5::AppendRows(file_.get(), where, "term_counts", H5T_NATIVE_INT32, static_cast<int64_t>(counts_.size()),
                   counts_.data());
  offsets_.clear();
  terms_.clear();
  counts_.clear();
}

void WordCountsWriter::Close() {
  const std::string where = Where(path_);
  Flush();
  std::vector<uint8_t> bytes;
  std::vector<int64_t> offsets = {0};
  for (const std::string& word : vocabulary_) {
    bytes.insert(bytes.end(), word.begin(), word.end());
    offsets.push_back(static_cast<int64_t>(bytes.size()));
  }
  if (bytes.empty()) {  // a corpus without a word (only punctuation)
    hdf5::CreateArray(file_.get(), where, "vocabulary_bytes", H5T_NATIVE_UINT8, {0}, 1 << 16);
  } else {
    hdf5::WriteArray(file_.get(), where, "vocabulary_bytes", H5T_NATIVE_UINT8, bytes.data(), {bytes.size()},
                     std::min<hsize_t>(bytes.size(), 1 << 16));
  }
  hdf5::WriteArray(file_.get(), where, "vocabulary_offsets", H5T_NATIVE_INT64, offsets.data(), {offsets.size()},
                   std::min<hsize_t>(offsets.size(), kChunkRows));
  hdf5::WriteAttribute(file_.get(), where, "docmatch_format", std::string(kFormat));
  hdf5::WriteAttribute(file_.get(), where, "format_version", kVersion);
  hdf5::WriteAttribute(file_.get(), where, "num_documents", documents_);
  hdf5::WriteAttribute(file_.get(), where, "num_occurrences", occurrences_);
  hdf5::CloseFile(file_, where);
  closed_ = true;
}

WordCounts WordCounts::Load(const std::string& path, int64_t documents) {
  const std::string where = Where(path);
  hdf5::SilenceErrors();
  if (!fs::exists(path)) hdf5::Fail(where, "no such file");
  if (H5Fis_hdf5(path.c_str()) <= 0) hdf5::Fail(where, "not an HDF5 file, or truncated: prepare the corpus again");
  hdf5::EnsureMemoryForFile();
  shard_format::Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) hdf5::Fail(where, "HDF5 cannot open it (truncated or damaged): prepare the corpus again");
  const hid_t f = file.get();
  if (H5Aexists(f, "docmatch_format") <= 0 || hdf5::ReadStringAttribute(f, where, "docmatch_format") != kFormat)
    hdf5::Fail(where, "an HDF5 file, but not docmatch's words of a corpus");
  if (hdf5::ReadIntAttribute(f, where, "format_version") != kVersion) hdf5::Fail(where, "another words format version");
  const int64_t n = hdf5::ReadIntAttribute(f, where, "num_documents");
  if (n != documents) {
    hdf5::Fail(where, "holds the words of " + std::to_string(n) + " documents, and its corpus has " +
                          std::to_string(documents) + ": it is not this corpus's; prepare the corpus again");
  }
  WordCounts out;
  const auto rows = [&](const char* name) { return static_cast<int64_t>(hdf5::Dimensions(f, where, name)[0]); };
  if (rows("document_offsets") != n + 1) hdf5::Fail(where, "document_offsets is not (documents + 1)");
  out.offsets_.resize(n + 1);
  hdf5::ReadRows(f, where, "document_offsets", H5T_NATIVE_INT64, 0, n + 1, out.offsets_.data());
  const int64_t entries = rows("term_ids");
  if (rows("term_counts") != entries || out.offsets_.front() != 0 || out.offsets_.back() != entries)
    hdf5::Fail(where, "its offsets and entries disagree (damaged)");
  // Offsets ascending within the entries, all checked before any is used.
  for (int64_t d = 0; d < n; ++d) {
    if (out.offsets_[d + 1] < out.offsets_[d] || out.offsets_[d + 1] > entries)
      hdf5::Fail(where, "document_offsets are not ascending within the entries (damaged)");
  }
  out.terms_.resize(entries);
  out.counts_.resize(entries);
  hdf5::ReadRows(f, where, "term_ids", H5T_NATIVE_INT32, 0, entries, out.terms_.data());
  hdf5::ReadRows(f, where, "term_counts", H5T_NATIVE_INT32, 0, entries, out.counts_.data());
  const int64_t words = rows("vocabulary_offsets") - 1;
  std::vector<int64_t> word_offsets(words + 1);
  hdf5::ReadRows(f, where, "vocabulary_offsets", H5T_NATIVE_INT64, 0, words + 1, word_offsets.data());
  const int64_t byte_count = rows("vocabulary_bytes");
  std::string bytes(static_cast<size_t>(byte_count), '\0');
  if (byte_count > 0) hdf5::ReadRows(f, where, "vocabulary_bytes", H5T_NATIVE_UINT8, 0, byte_count, bytes.data());
  out.vocabulary_.reserve(words);
  for (int64_t w = 0; w < words; ++w) {
    if (word_offsets[w] < 0 || word_offsets[w] > word_offsets[w + 1] || word_offsets[w + 1] > byte_count)
      hdf5::Fail(where, "vocabulary_offsets are not ascending within the bytes (damaged)");
    out.vocabulary_.emplace_back(bytes, word_offsets[w], word_offsets[w + 1] - word_offsets[w]);
  }
  out.ids_.reserve(out.vocabulary_.size());
  for (size_t i = 0; i < out.vocabulary_.size(); ++i) out.ids_.emplace(out.vocabulary_[i], static_cast<int32_t>(i));
  out.lengths_.assign(n, 0);
  for (int64_t d = 0; d < n; ++d) {
    for (int64_t e = out.offsets_[d]; e < out.offsets_[d + 1]; ++e) {
      if (out.terms_[e] < 0 || out.terms_[e] >= words || out.counts_[e] < 1 ||
          (e > out.offsets_[d] && out.terms_[e] <= out.terms_[e - 1])) {
        hdf5::Fail(where, "entry " + std::to_string(e) + " of document " + std::to_string(d) +
                              " is not a word of its vocabulary with a count (damaged)");
      }
      out.lengths_[d] += out.counts_[e];
    }
  }
  return out;
}

WordCounts WordCounts::OfCorpus(const std::string& corpus_directory, int64_t documents) {
  const std::string path = (fs::path(corpus_directory) / kWordsFile).string();
  if (!fs::exists(path)) {
    throw Error("data", "corpus '" + corpus_directory + "' has no " + kWordsFile +
                            ": it was prepared before docmatch kept each document's words, which BM25 ranks by. "
                            "Prepare it again (docmatch prepare --input <your documents> --output " +
                            corpus_directory + " --overwrite), or rank with --lexical tfidf");
  }
  return Load(path, documents);
}

std::optional<int32_t> WordCounts::Id(const std::string& word) const {
  const auto it = ids_.find(word);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

}  // namespace docmatch::data
