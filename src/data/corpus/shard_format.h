// The docmatch shard format (HDF5), in one place: dataset and attribute names,
// the format version, and the RAII handle both sides use.
//
// A shard holds a few thousand documents as flat arrays plus offsets, chunked
// so that a reader takes a range of documents with one hyperslab per dataset:
//   tokens             int32  (total tokens,)
//   sentence_offsets   int64  (sentences + 1,)   into tokens
//   paragraph_offsets  int64  (paragraphs + 1,)  into sentences
//   document_offsets   int64  (documents + 1,)   into paragraphs
//   document_ids       UTF-8 strings (documents,), fixed size, NUL-padded
//   document_titles    UTF-8 strings (documents,), fixed size, NUL-padded; "" when none
// Root attributes: docmatch_format ("docmatch-shard"), format_version,
// tokenizer_hash, vocab_size, num_documents, num_paragraphs, num_sentences,
// num_tokens. h5ls/h5dump show all of it.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <utility>

namespace docmatch::data::shard_format {

// Version 2 stores ids and titles as fixed-size strings (under the chunks'
// checksums); version 1 (variable-length strings) is still read.
constexpr int kVersion = 2;
constexpr int kOldestVersion = 1;
constexpr const char* kFormatName = "docmatch-shard";

constexpr const char* kTokens = "tokens";
constexpr const char* kSentenceOffsets = "sentence_offsets";
constexpr const char* kParagraphOffsets = "paragraph_offsets";
constexpr const char* kDocumentOffsets = "document_offsets";
constexpr const char* kDocumentIds = "document_ids";
constexpr const char* kDocumentTitles = "document_titles";

constexpr const char* kAttrFormat = "docmatch_format";
constexpr const char* kAttrVersion = "format_version";
constexpr const char* kAttrTokenizerHash = "tokenizer_hash";
constexpr const char* kAttrVocabSize = "vocab_size";
constexpr const char* kAttrDocuments = "num_documents";
constexpr const char* kAttrParagraphs = "num_paragraphs";
constexpr const char* kAttrSentences = "num_sentences";
constexpr const char* kAttrTokens = "num_tokens";

// Chunk sizes (elements): large enough that a range read touches few chunks,
// small enough that reading one document does not pull megabytes.
constexpr hsize_t kTokenChunk = 1 << 16;
constexpr hsize_t kOffsetChunk = 1 << 13;
constexpr hsize_t kStringChunk = 1 << 10;

// Owns one HDF5 identifier and closes it with the matching H5?close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)), closer_(other.closer_) {}
  Handle& operator=(Handle&& other) noexcept {
    std::swap(id_, other.id_);
    std::swap(closer_, other.closer_);
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (id_ >= 0 && closer_) closer_(id_);
  }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now and says whether HDF5 could: a writer's dataset or file close
  // is where buffered chunks reach the disk, so its failure is a write error.
  herr_t Close() {
    const herr_t status = id_ >= 0 && closer_ ? closer_(id_) : 0;
    id_ = H5I_INVALID_HID;
    return status;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// A UTF-8 variable-length string type (caller owns the handle).
inline Handle VariableStringType() {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  return Handle(type, H5Tclose);
}

}  // namespace docmatch::data::shard_format
