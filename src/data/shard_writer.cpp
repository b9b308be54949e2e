#include "data/shard_writer.h"

#include <glog/logging.h>

#include <filesystem>
#include <stdexcept>

#include "data/shard_format.h"

namespace docmatch::data {
namespace sf = shard_format;
namespace {

void Check(herr_t status, const std::string& path, const char* what) {
  if (status < 0) throw std::runtime_error("[data] writing shard '" + path + "': " + what + " failed");
}

void WriteArray(hid_t file, const std::string& path, const char* name, hid_t type, const void* data, hsize_t count,
                hsize_t chunk) {
  const hsize_t dims[1] = {count};
  const hsize_t max_dims[1] = {H5S_UNLIMITED};  // unlimited: any chunk size is legal, even for 0 elements
  sf::Handle space(H5Screate_simple(1, dims, max_dims), H5Sclose);
  sf::Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  const hsize_t chunk_dims[1] = {chunk};
  Check(H5Pset_chunk(properties.get(), 1, chunk_dims), path, name);
  sf::Handle dataset(H5Dcreate2(file, name, type, space.get(), H5P_DEFAULT, properties.get(), H5P_DEFAULT), H5Dclose);
  if (!dataset.valid()) Check(-1, path, name);
  if (count > 0) Check(H5Dwrite(dataset.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), path, name);
}

void WriteStrings(hid_t file, const std::string& path, const char* name, const std::vector<std::string>& values) {
  std::vector<const char*> pointers;
  pointers.reserve(values.size());
  for (const auto& value : values) pointers.push_back(value.c_str());
  sf::Handle type = sf::VariableStringType();
  WriteArray(file, path, name, type.get(), pointers.data(), pointers.size(), sf::kStringChunk);
}

void WriteAttribute(hid_t file, const std::string& path, const char* name, int64_t value) {
  sf::Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  sf::Handle attribute(H5Acreate2(file, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attribute.valid()) Check(-1, path, name);
  Check(H5Awrite(attribute.get(), H5T_NATIVE_INT64, &value), path, name);
}

void WriteAttribute(hid_t file, const std::string& path, const char* name, const std::string& value) {
  sf::Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  // Fixed-size strings: h5dump prints them plainly.
  sf::Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), std::max<size_t>(value.size(), 1));
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  sf::Handle attribute(H5Acreate2(file, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attribute.valid()) Check(-1, path, name);
  Check(H5Awrite(attribute.get(), type.get(), value.c_str()), path, name);
}

}  // namespace

ShardWriter::ShardWriter(std::string path, std::string tokenizer_hash, int vocab_size)
    : path_(std::move(path)), tokenizer_hash_(std::move(tokenizer_hash)), vocab_size_(vocab_size) {}

ShardWriter::~ShardWriter() {
  if (!closed_) {
    std::error_code ignored;
    std::filesystem::remove(path_ + ".tmp", ignored);
  }
}

void ShardWriter::Add(const Document& document) {
  CHECK(!closed_) << "[data] shard " << path_ << " is closed";
  CHECK_GE(document.num_paragraphs(), 0) << "document " << document.id;
  CHECK_EQ(document.sentence_offsets.back(), document.num_tokens()) << "document " << document.id;
  CHECK_EQ(document.paragraph_offsets.back(), document.num_sentences()) << "document " << document.id;
  const int64_t token_base = static_cast<int64_t>(tokens_.size());
  const int64_t sentence_base = static_cast<int64_t>(sentence_offsets_.size()) - 1;
  const int64_t paragraph_base = static_cast<int64_t>(paragraph_offsets_.size()) - 1;
  tokens_.insert(tokens_.end(), document.tokens.begin(), document.tokens.end());
  for (size_t s = 1; s < document.sentence_offsets.size(); ++s) {
    sentence_offsets_.push_back(token_base + document.sentence_offsets[s]);
  }
  for (size_t p = 1; p < document.paragraph_offsets.size(); ++p) {
    paragraph_offsets_.push_back(sentence_base + document.paragraph_offsets[p]);
  }
  document_offsets_.push_back(paragraph_base + document.num_paragraphs());
  ids_.push_back(document.id);
  titles_.push_back(document.title);
  counts_.documents += 1;
  counts_.paragraphs += document.num_paragraphs();
  counts_.sentences += document.num_sentences();
  counts_.tokens += document.num_tokens();
}

ShardCounts ShardWriter::Close() {
  CHECK(!closed_) << "[data] shard " << path_ << " closed twice";
  const std::string temporary = path_ + ".tmp";
  {
    sf::Handle file(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (!file.valid()) throw std::runtime_error("[data] cannot create shard '" + temporary + "'");
    const hid_t f = file.get();
    WriteArray(f, path_, sf::kTokens, H5T_NATIVE_INT32, tokens_.data(), tokens_.size(), sf::kTokenChunk);
    WriteArray(f, path_, sf::kSentenceOffsets, H5T_NATIVE_INT64, sentence_offsets_.data(), sentence_offsets_.size(),
               sf::kOffsetChunk);
    WriteArray(f, path_, sf::kParagraphOffsets, H5T_NATIVE_INT64, paragraph_offsets_.data(), paragraph_offsets_.size(),
               sf::kOffsetChunk);
    WriteArray(f, path_, sf::kDocumentOffsets, H5T_NATIVE_INT64, document_offsets_.data(), document_offsets_.size(),
               sf::kOffsetChunk);
    WriteStrings(f, path_, sf::kDocumentIds, ids_);
    WriteStrings(f, path_, sf::kDocumentTitles, titles_);
    WriteAttribute(f, path_, sf::kAttrFormat, std::string(sf::kFormatName));
    WriteAttribute(f, path_, sf::kAttrVersion, int64_t{sf::kVersion});
    WriteAttribute(f, path_, sf::kAttrTokenizerHash, tokenizer_hash_);
    WriteAttribute(f, path_, sf::kAttrVocabSize, int64_t{vocab_size_});
    WriteAttribute(f, path_, sf::kAttrDocuments, counts_.documents);
    WriteAttribute(f, path_, sf::kAttrParagraphs, counts_.paragraphs);
    WriteAttribute(f, path_, sf::kAttrSentences, counts_.sentences);
    WriteAttribute(f, path_, sf::kAttrTokens, counts_.tokens);
    Check(H5Fflush(f, H5F_SCOPE_GLOBAL), path_, "flush");
  }
  std::filesystem::rename(temporary, path_);
  closed_ = true;
  // Free the buffers: a closed writer holds nothing.
  tokens_ = {};
  sentence_offsets_ = {};
  paragraph_offsets_ = {};
  document_offsets_ = {};
  ids_ = {};
  titles_ = {};
  return counts_;
}

}  // namespace docmatch::data
