// BERT's WordPiece tokenizer, for vocabularies imported with pretrained
// weights (`docmatch import-hf`).
//
// Text goes through BERT's basic tokenization, as the `tokenizers` library's
// BertNormalizer and BertPreTokenizer define it:
//   1. clean: drop U+0000, U+FFFD and "other" characters (Unicode categories
//      Cc, Cf, Cs, Co, Cn) except \t \n \r; every White_Space character
//      becomes a space;
//   2. put spaces around CJK ideographs;
//   3. strip accents (NFD, then drop non-spacing marks, Mn) when asked, which
//      by default is whenever lower-casing is;
//   4. lower-case each character (full Unicode mapping);
//   5. split on white space, and make each punctuation character (ASCII
//      punctuation or Unicode P*) a word of its own.
// Each word then becomes greedy longest-match-first pieces, continuations
// prefixed "##"; a word with no full cover, or longer than 100 characters,
// is the unknown token. Unicode properties come from ICU.
//
// The vocabulary is kept in docmatch id order (tokenizer.h's reserved ids
// first); `import-hf` permutes BERT's ids into that order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace docmatch::data {

struct WordPieceOptions {
  bool lowercase = true;
  bool strip_accents = true;  // BERT: follows lowercase unless set
  bool chinese_chars = true;  // spaces around CJK ideographs
  int max_chars_per_word = 100;
  std::string continuation = "##";

  nlohmann::json ToJson() const;
  static WordPieceOptions FromJson(const nlohmann::json& json);
};

class WordPiece {
 public:
  // `vocabulary[i]` is the piece of id i.
  WordPiece(std::vector<std::string> vocabulary, WordPieceOptions options, int32_t unk_id);

  // The model file docmatch keeps next to a corpus (tokenizer.model): the
  // magic line, the options as one JSON line, then one piece per line in id
  // order.
  static bool IsModelFile(std::string_view bytes);
  static WordPiece Parse(std::string_view bytes, const std::string& origin);
  std::string Serialize() const;

  // BERT's basic tokenization alone: the words and punctuation marks.
  std::vector<std::string> BasicTokenize(std::string_view text) const;
  std::vector<int32_t> Encode(std::string_view text) const;
  // Pieces joined, continuations glued to the piece before.
  std::string Decode(const std::vector<int32_t>& ids) const;

  const std::string& Piece(int32_t id) const { return vocabulary_.at(id); }
  int vocab_size() const { return static_cast<int>(vocabulary_.size()); }
  const WordPieceOptions& options() const { return options_; }

 private:
  void AppendWord(const std::string& word, std::vector<int32_t>* ids) const;

  std::vector<std::string> vocabulary_;
  std::unordered_map<std::string, int32_t> ids_;
  WordPieceOptions options_;
  int32_t unk_id_;
};

}  // namespace docmatch::data
