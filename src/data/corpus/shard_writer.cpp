// Appending documents to a shard's chunked datasets and closing it under its
// final name only when complete (shard_writer.h).
#include "data/corpus/shard_writer.h"

#include <glog/logging.h>

#include <filesystem>
#include <stdexcept>

#include "console/error.h"
#include "data/corpus/hdf5_util.h"
#include "data/corpus/shard_format.h"

namespace docmatch::data {
namespace sf = shard_format;
namespace {

std::string Where(const std::string& path) { return "[data] writing shard '" + path + "'"; }

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
  if (closed_) throw std::logic_error("[data] shard " + path_ + " is closed");
  if (document.num_paragraphs() < 0 || document.sentence_offsets.back() != document.num_tokens() ||
      document.paragraph_offsets.back() != document.num_sentences()) {
    throw Error("data", "document '" + document.id + "' for shard " + path_ +
                            ": its sentence and paragraph offsets do not match its tokens");
  }
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
  if (closed_) throw std::logic_error("[data] shard " + path_ + " closed twice");
  const std::string temporary = path_ + ".tmp";
  {
    const std::string where = Where(path_);
    sf::Handle file = hdf5::CreateFile(temporary, where);
    const hid_t f = file.get();
    hdf5::WriteArray(f, where, sf::kTokens, H5T_NATIVE_INT32, tokens_.data(), {tokens_.size()}, sf::kTokenChunk);
    hdf5::WriteArray(f, where, sf::kSentenceOffsets, H5T_NATIVE_INT64, sentence_offsets_.data(),
                     {sentence_offsets_.size()}, sf::kOffsetChunk);
    hdf5::WriteArray(f, where, sf::kParagraphOffsets, H5T_NATIVE_INT64, paragraph_offsets_.data(),
                     {paragraph_offsets_.size()}, sf::kOffsetChunk);
    hdf5::WriteArray(f, where, sf::kDocumentOffsets, H5T_NATIVE_INT64, document_offsets_.data(),
                     {document_offsets_.size()}, sf::kOffsetChunk);
    hdf5::WriteStrings(f, where, sf::kDocumentIds, ids_, sf::kStringChunk);
    hdf5::WriteStrings(f, where, sf::kDocumentTitles, titles_, sf::kStringChunk);
    hdf5::WriteAttribute(f, where, sf::kAttrFormat, std::string(sf::kFormatName));
    hdf5::WriteAttribute(f, where, sf::kAttrVersion, int64_t{sf::kVersion});
    hdf5::WriteAttribute(f, where, sf::kAttrTokenizerHash, tokenizer_hash_);
    hdf5::WriteAttribute(f, where, sf::kAttrVocabSize, int64_t{vocab_size_});
    hdf5::WriteAttribute(f, where, sf::kAttrDocuments, counts_.documents);
    hdf5::WriteAttribute(f, where, sf::kAttrParagraphs, counts_.paragraphs);
    hdf5::WriteAttribute(f, where, sf::kAttrSentences, counts_.sentences);
    hdf5::WriteAttribute(f, where, sf::kAttrTokens, counts_.tokens);
    hdf5::CloseFile(file, where);
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
