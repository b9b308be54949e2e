// The corpus tokenizer: SentencePiece (what `prepare` trains) or WordPiece
// (data/text/wordpiece.h: what `import-hf` writes from a BERT vocabulary), behind
// one interface and one model file, told apart by the file's first bytes.
//
// Every docmatch vocabulary begins with the same special ids, whatever model
// made it, so that samplers and models can name them as constants:
//   0 [PAD]   1 <unk>   2 [CLS]   3 [SEP]   4 [MASK]
// A trained model reserves them through SentencePiece's pad/unk ids and control
// symbols; a loaded model is checked to have them and refused otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace docmatch::data {

class WordPiece;

constexpr int32_t kPadId = 0;
constexpr int32_t kUnkId = 1;
constexpr int32_t kClsId = 2;
constexpr int32_t kSepId = 3;
constexpr int32_t kMaskId = 4;

// The file a WordPiece model is kept in (a SentencePiece one: tokenizer.model),
// so that no tool takes docmatch's WordPiece file for SentencePiece.
constexpr const char* kWordPieceFile = "tokenizer.wordpiece";

struct TokenizerTrainingOptions {
  int vocab_size = 16000;              // pieces, the reserved ids included
  std::string model_type = "unigram";  // "unigram" or "bpe"
  double character_coverage = 0.9995;  // the rest map to <unk>
  int num_threads = 2;
  // The trainer samples at most this many of the sentences it is given.
  int64_t max_sentences = 1'000'000;
};

class Tokenizer {
 public:
  // Loads a SentencePiece or docmatch WordPiece model file; errors name the
  // file and what is wrong.
  static Tokenizer Load(const std::string& model_path);
  // Writes a WordPiece model (ids in docmatch order) and loads it back.
  static Tokenizer SaveWordPiece(const WordPiece& wordpiece, const std::string& model_path);

  // Trains on the sentences produced by `next_sentence` (returns false when
  // done) and writes the model to `model_path` (through a temporary name).
  static Tokenizer Train(const std::function<bool(std::string*)>& next_sentence,
                         const TokenizerTrainingOptions& options, const std::string& model_path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Thread-safe: encoding only reads the model.
  std::vector<int32_t> Encode(std::string_view text) const;
  std::string Decode(const std::vector<int32_t>& ids) const;
  std::string IdToPiece(int32_t id) const;

  int vocab_size() const;
  // "sentencepiece" or "wordpiece".
  const char* kind() const;
  // Hex FNV-1a 64 of the serialized model: shards record it so that a corpus
  // and a model trained on another tokenizer cannot be mixed silently.
  const std::string& hash() const { return hash_; }
  const std::string& serialized_model() const { return serialized_; }

 private:
  Tokenizer(std::string serialized, const std::string& origin);
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;  // one of these two
  std::unique_ptr<WordPiece> wordpiece_;
  std::string serialized_;
  std::string hash_;
};

// "tokenizer.model" for a SentencePiece model, kWordPieceFile for WordPiece.
std::string TokenizerFileName(const Tokenizer& tokenizer);

// Hex FNV-1a 64 of `bytes`.
std::string Fnv1a64Hex(std::string_view bytes);

}  // namespace docmatch::data
