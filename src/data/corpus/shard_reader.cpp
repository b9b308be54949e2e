// Opening a shard (format, version and tokenizer checks), reading a range of
// documents with one hyperslab per dataset, and the process-wide LRU of open files (shard_reader.h).
#include "data/corpus/shard_reader.h"

#include "data/corpus/hdf5_util.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <list>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace docmatch::data {
namespace sf = shard_format;
namespace {

std::string Where(const std::string& path) { return "[data] shard '" + path + "'"; }

[[noreturn]] void Fail(const std::string& path, const std::string& what) { hdf5::Fail(Where(path), what); }

int64_t ReadIntAttribute(hid_t file, const std::string& path, const char* name) {
  return hdf5::ReadIntAttribute(file, Where(path), name);
}

std::string ReadStringAttribute(hid_t file, const std::string& path, const char* name) {
  return hdf5::ReadStringAttribute(file, Where(path), name);
}

void CheckNonDecreasing(const std::vector<int64_t>& offsets, const std::string& path, const char* name) {
  for (size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] < offsets[i - 1]) {
      Fail(path, std::string(name) + " decreases at element " + std::to_string(i) + " (corrupt shard)");
    }
  }
}

// Least recently used first out: at most `capacity` files open; a file still
// in use by a read stays open (shared_ptr) until that read returns.
class OpenFiles {
 public:
  static OpenFiles& Instance() {
    static OpenFiles files;
    return files;
  }
  std::shared_ptr<const sf::Handle> Acquire(uint64_t key, const std::string& path) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
    hdf5::EnsureMemoryForFile();
    auto file = std::make_shared<const sf::Handle>(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!file->valid())
      Fail(path, "HDF5 cannot open it: the file is truncated or damaged; rebuild it with `docmatch prepare`");
    lru_.emplace_front(key, file);
    index_[key] = lru_.begin();
    while (lru_.size() > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
    return file;
  }
  void Forget(uint64_t key) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = index_.find(key);
    if (it == index_.end()) return;
    lru_.erase(it->second);
    index_.erase(it);
  }
  size_t capacity() const { return capacity_; }
  size_t open() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return lru_.size();
  }
  uint64_t NextKey() { return ++next_key_; }

 private:
  OpenFiles() {
    const char* env = std::getenv("DOCMATCH_MAX_OPEN_SHARDS");
    capacity_ = env && std::atoi(env) > 0 ? static_cast<size_t>(std::atoi(env)) : 8;
  }
  std::mutex mutex_;
  size_t capacity_;
  std::list<std::pair<uint64_t, std::shared_ptr<const sf::Handle>>> lru_;
  std::unordered_map<uint64_t, std::list<std::pair<uint64_t, std::shared_ptr<const sf::Handle>>>::iterator> index_;
  std::atomic<uint64_t> next_key_{0};
};

}  // namespace

size_t MaxOpenShards() { return OpenFiles::Instance().capacity(); }
size_t OpenShardFiles() { return OpenFiles::Instance().open(); }

ShardReader::~ShardReader() {
  if (key_ != 0) OpenFiles::Instance().Forget(key_);
}

ShardReader::ShardReader(ShardReader&& other) noexcept
    : path_(std::move(other.path_)),
      key_(std::exchange(other.key_, 0)),
      header_(std::move(other.header_)),
      document_offsets_(std::move(other.document_offsets_)) {}

ShardReader& ShardReader::operator=(ShardReader&& other) noexcept {
  if (this != &other) {
    if (key_ != 0) OpenFiles::Instance().Forget(key_);
    path_ = std::move(other.path_);
    key_ = std::exchange(other.key_, 0);
    header_ = std::move(other.header_);
    document_offsets_ = std::move(other.document_offsets_);
  }
  return *this;
}

std::shared_ptr<const sf::Handle> ShardReader::File() const { return OpenFiles::Instance().Acquire(key_, path_); }

ShardReader::ShardReader(std::string path) : path_(std::move(path)), key_(OpenFiles::Instance().NextKey()) {
  hdf5::SilenceErrors();
  if (!std::filesystem::exists(path_)) Fail(path_, "no such file");
  if (H5Fis_hdf5(path_.c_str()) <= 0) {
    Fail(path_, "not an HDF5 file, or truncated (" + std::to_string(std::filesystem::file_size(path_)) +
                    " bytes); re-run `docmatch prepare` to rebuild it");
  }
  const std::shared_ptr<const sf::Handle> file = File();
  const hid_t f = file->get();
  if (H5Aexists(f, sf::kAttrFormat) <= 0 || ReadStringAttribute(f, path_, sf::kAttrFormat) != sf::kFormatName) {
    Fail(path_, std::string("an HDF5 file, but not a docmatch shard (no '") + sf::kAttrFormat + "=" + sf::kFormatName +
                    "' attribute); make shards with `docmatch prepare`");
  }
  header_.format_version = ReadIntAttribute(f, path_, sf::kAttrVersion);
  if (header_.format_version < sf::kOldestVersion || header_.format_version > sf::kVersion) {
    Fail(path_, "format version " + std::to_string(header_.format_version) + ", this docmatch reads version " +
                    std::to_string(sf::kVersion));
  }
  header_.tokenizer_hash = ReadStringAttribute(f, path_, sf::kAttrTokenizerHash);
  header_.vocab_size = ReadIntAttribute(f, path_, sf::kAttrVocabSize);
  header_.counts.documents = ReadIntAttribute(f, path_, sf::kAttrDocuments);
  header_.counts.paragraphs = ReadIntAttribute(f, path_, sf::kAttrParagraphs);
  header_.counts.sentences = ReadIntAttribute(f, path_, sf::kAttrSentences);
  header_.counts.tokens = ReadIntAttribute(f, path_, sf::kAttrTokens);

  document_offsets_ = ReadInt64(f, sf::kDocumentOffsets, 0, header_.counts.documents + 1);
  CheckNonDecreasing(document_offsets_, path_, sf::kDocumentOffsets);
  if (document_offsets_.front() != 0 || document_offsets_.back() != header_.counts.paragraphs) {
    Fail(path_, "document_offsets end at " + std::to_string(document_offsets_.back()) + " but the shard has " +
                    std::to_string(header_.counts.paragraphs) + " paragraphs (corrupt shard)");
  }
}

std::vector<int64_t> ShardReader::ReadInt64(hid_t file, const char* name, int64_t begin, int64_t count) const {
  std::vector<int64_t> values(count);
  hdf5::ReadRows(file, Where(path_), name, H5T_NATIVE_INT64, begin, count, values.data());
  return values;
}

std::vector<std::string> ShardReader::ReadStrings(hid_t file, const char* name, int64_t begin, int64_t count) const {
  return hdf5::ReadStrings(file, Where(path_), name, begin, count);
}

std::vector<std::string> ShardReader::ReadIds() const {
  return ReadStrings(File()->get(), sf::kDocumentIds, 0, header_.counts.documents);
}

std::vector<DocumentLength> ShardReader::ReadLengths() const {
  const ShardCounts& c = header_.counts;
  const std::shared_ptr<const sf::Handle> file = File();
  const std::vector<int64_t> paragraphs = ReadInt64(file->get(), shard_format::kParagraphOffsets, 0, c.paragraphs + 1);
  const std::vector<int64_t> sentences = ReadInt64(file->get(), shard_format::kSentenceOffsets, 0, c.sentences + 1);
  CheckNonDecreasing(paragraphs, path_, sf::kParagraphOffsets);
  CheckNonDecreasing(sentences, path_, sf::kSentenceOffsets);
  if (paragraphs.front() != 0 || sentences.front() != 0 || paragraphs.back() != c.sentences ||
      sentences.back() != c.tokens) {
    Fail(path_, "offsets disagree with the counts in the header (corrupt shard)");
  }
  std::vector<DocumentLength> lengths(c.documents);
  for (int64_t d = 0; d < c.documents; ++d) {
    const int64_t pa = document_offsets_[d], pb = document_offsets_[d + 1];
    lengths[d] = {pb - pa, paragraphs[pb] - paragraphs[pa], sentences[paragraphs[pb]] - sentences[paragraphs[pa]]};
  }
  return lengths;
}

std::vector<Document> ShardReader::Read(int64_t begin, int64_t end) const {
  if (begin < 0 || end > num_documents() || begin > end) {
    Fail(path_, "document range [" + std::to_string(begin) + ", " + std::to_string(end) + ") outside 0.." +
                    std::to_string(num_documents()));
  }
  const int64_t count = end - begin;
  std::vector<Document> documents(count);
  if (count == 0) return documents;
  // One hyperslab per dataset: paragraphs, then sentences, then tokens.
  const std::shared_ptr<const sf::Handle> file = File();
  const hid_t f = file->get();
  const int64_t p0 = document_offsets_[begin], p1 = document_offsets_[end];
  const std::vector<int64_t> paragraphs = ReadInt64(f, sf::kParagraphOffsets, p0, p1 - p0 + 1);
  CheckNonDecreasing(paragraphs, path_, sf::kParagraphOffsets);
  const int64_t s0 = paragraphs.front(), s1 = paragraphs.back();
  const std::vector<int64_t> sentences = ReadInt64(f, sf::kSentenceOffsets, s0, s1 - s0 + 1);
  CheckNonDecreasing(sentences, path_, sf::kSentenceOffsets);
  const int64_t t0 = sentences.front(), t1 = sentences.back();
  std::vector<int32_t> tokens(t1 - t0);
  hdf5::ReadRows(f, Where(path_), sf::kTokens, H5T_NATIVE_INT32, t0, t1 - t0, tokens.data());
  std::vector<std::string> ids = ReadStrings(f, sf::kDocumentIds, begin, count);
  std::vector<std::string> titles = ReadStrings(f, sf::kDocumentTitles, begin, count);

  for (int64_t d = 0; d < count; ++d) {
    Document& doc = documents[d];
    doc.index = begin + d;
    doc.id = std::move(ids[d]);
    doc.title = std::move(titles[d]);
    // Paragraph range of this document, in `paragraphs` coordinates.
    const int64_t pa = document_offsets_[begin + d] - p0, pb = document_offsets_[begin + d + 1] - p0;
    const int64_t sa = paragraphs[pa] - s0, sb = paragraphs[pb] - s0;
    const int64_t ta = sentences[sa] - t0, tb = sentences[sb] - t0;
    doc.tokens.assign(tokens.begin() + ta, tokens.begin() + tb);
    // A token outside the vocabulary would index past the embedding table
    // later, far from here; name the shard and the document now.
    for (const int32_t token : doc.tokens) {
      if (token < 0 || token >= header_.vocab_size) {
        Fail(path_, "document \"" + doc.id + "\" (index " + std::to_string(doc.index) + ") holds token id " +
                        std::to_string(token) + ", outside the vocabulary of " + std::to_string(header_.vocab_size) +
                        " (corrupt shard); rebuild it with `docmatch prepare`");
      }
    }
    doc.sentence_offsets.resize(sb - sa + 1);
    for (int64_t s = sa; s <= sb; ++s) doc.sentence_offsets[s - sa] = sentences[s] - sentences[sa];
    doc.paragraph_offsets.resize(pb - pa + 1);
    for (int64_t p = pa; p <= pb; ++p) doc.paragraph_offsets[p - pa] = paragraphs[p] - paragraphs[pa];
  }
  return documents;
}

}  // namespace docmatch::data
