// BERT's basic tokenization (ICU character properties) and greedy
// longest-match-first WordPiece (wordpiece.h).
#include "data/text/wordpiece.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <stdexcept>

#include "console/error.h"

namespace docmatch::data {
namespace {

constexpr std::string_view kMagic = "docmatch-wordpiece 1\n";

// Unicode "other" (C*): control, format, surrogate, private use, unassigned.
bool IsOther(UChar32 c) {
  switch (u_charType(c)) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
      return true;
    default:
      return false;
  }
}

bool IsPunctuation(UChar32 c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  switch (u_charType(c)) {
    case U_CONNECTOR_PUNCTUATION:
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
      return true;
    default:
      return false;
  }
}

// The CJK Unified Ideographs blocks BERT spaces out (not all of CJK: Hangul,
// kana and the like stay as they are).
bool IsCjkIdeograph(UChar32 c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Steps 1-4 of the header: the normalised text as UTF-16 for ICU.
icu::UnicodeString Normalize(std::string_view text, const WordPieceOptions& options) {
  icu::UnicodeString cleaned;
  for (int32_t i = 0, n = static_cast<int32_t>(text.size()); i < n;) {
    UChar32 c;
    U8_NEXT(text.data(), i, n, c);
    if (c < 0) continue;  // ill-formed UTF-8 reads as U+FFFD, which is dropped
    const bool control_space = c == '\t' || c == '\n' || c == '\r';
    if (c == 0 || c == 0xFFFD || (!control_space && IsOther(c))) continue;
    if (control_space || u_isUWhiteSpace(c)) {
      cleaned.append(static_cast<UChar>(' '));
    } else if (options.chinese_chars && IsCjkIdeograph(c)) {
      cleaned.append(static_cast<UChar>(' ')).append(c).append(static_cast<UChar>(' '));
    } else {
      cleaned.append(c);
    }
  }
  if (options.strip_accents) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
    icu::UnicodeString decomposed = U_SUCCESS(status) ? nfd->normalize(cleaned, status) : cleaned;
    if (U_FAILURE(status)) throw Error("wordpiece", std::string("NFD failed: ") + u_errorName(status));
    cleaned.remove();
    for (int32_t i = 0; i < decomposed.length();) {
      const UChar32 c = decomposed.char32At(i);
      if (u_charType(c) != U_NON_SPACING_MARK) cleaned.append(c);
      i += U16_LENGTH(c);
    }
  }
  if (options.lowercase) {
    // Character by character, as the tokenizers library does: no
    // context-dependent mappings such as a word-final sigma.
    icu::UnicodeString lowered;
    for (int32_t i = 0; i < cleaned.length();) {
      const UChar32 c = cleaned.char32At(i);
      icu::UnicodeString one(c);
      lowered.append(one.toLower(icu::Locale::getRoot()));
      i += U16_LENGTH(c);
    }
    cleaned = lowered;
  }
  return cleaned;
}

}  // namespace

nlohmann::json WordPieceOptions::ToJson() const {
  return {{"lowercase", lowercase},
          {"strip_accents", strip_accents},
          {"chinese_chars", chinese_chars},
          {"max_chars_per_word", max_chars_per_word},
          {"continuation", continuation}};
}

WordPieceOptions WordPieceOptions::FromJson(const nlohmann::json& json) {
  WordPieceOptions o;
  o.lowercase = json.at("lowercase").get<bool>();
  o.strip_accents = json.at("strip_accents").get<bool>();
  o.chinese_chars = json.at("chinese_chars").get<bool>();
  o.max_chars_per_word = json.at("max_chars_per_word").get<int>();
  o.continuation = json.at("continuation").get<std::string>();
  return o;
}

WordPiece::WordPiece(std::vector<std::string> vocabulary, WordPieceOptions options, int32_t unk_id)
    : vocabulary_(std::move(vocabulary)), options_(std::move(options)), unk_id_(unk_id) {
  for (size_t i = 0; i < vocabulary_.size(); ++i) ids_.emplace(vocabulary_[i], static_cast<int32_t>(i));
}

bool WordPiece::IsModelFile(std::string_view bytes) { return bytes.substr(0, kMagic.size()) == kMagic; }

WordPiece WordPiece::Parse(std::string_view bytes, const std::string& origin) {
  if (!IsModelFile(bytes)) throw std::runtime_error("'" + origin + "' is not a docmatch WordPiece model");
  bytes.remove_prefix(kMagic.size());
  const size_t options_end = bytes.find('\n');
  if (options_end == std::string_view::npos) throw std::runtime_error("'" + origin + "': no options line");
  WordPieceOptions options;
  try {
    options = WordPieceOptions::FromJson(nlohmann::json::parse(bytes.substr(0, options_end)));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("'" + origin + "': options line: " + e.what());
  }
  bytes.remove_prefix(options_end + 1);
  std::vector<std::string> vocabulary;
  while (!bytes.empty()) {
    const size_t end = bytes.find('\n');
    vocabulary.emplace_back(bytes.substr(0, end));
    if (end == std::string_view::npos) break;
    bytes.remove_prefix(end + 1);
  }
  return WordPiece(std::move(vocabulary), std::move(options), /*unk_id=*/1);
}

std::string WordPiece::Serialize() const {
  std::string out(kMagic);
  out += options_.ToJson().dump() + "\n";
  for (const std::string& piece : vocabulary_) out += piece + "\n";
  return out;
}

std::vector<std::string> WordPiece::BasicTokenize(std::string_view text) const {
  const icu::UnicodeString normalized = Normalize(text, options_);
  std::vector<std::string> words;
  icu::UnicodeString word;
  auto flush = [&] {
    if (word.isEmpty()) return;
    words.emplace_back();
    word.toUTF8String(words.back());
    word.remove();
  };
  for (int32_t i = 0; i < normalized.length();) {
    const UChar32 c = normalized.char32At(i);
    i += U16_LENGTH(c);
    if (u_isUWhiteSpace(c)) {
      flush();
    } else if (IsPunctuation(c)) {
      flush();
      word.append(c);
      flush();
    } else {
      word.append(c);
    }
  }
  flush();
  return words;
}

void WordPiece::AppendWord(const std::string& word, std::vector<int32_t>* ids) const {
  std::vector<int32_t> starts;  // byte offset of each character, then the end
  for (int32_t i = 0, n = static_cast<int32_t>(word.size()); i < n;) {
    starts.push_back(i);
    U8_FWD_1(word.data(), i, n);
  }
  const int64_t chars = static_cast<int64_t>(starts.size());
  starts.push_back(static_cast<int32_t>(word.size()));
  if (chars > options_.max_chars_per_word) {
    ids->push_back(unk_id_);
    return;
  }
  std::vector<int32_t> pieces;
  std::string candidate;
  for (int64_t begin = 0; begin < chars;) {
    int64_t end = chars;
    int32_t found = -1;
    for (; end > begin; --end) {
      candidate.assign(begin > 0 ? options_.continuation : "");
      candidate.append(word, starts[begin], starts[end] - starts[begin]);
      const auto it = ids_.find(candidate);
      if (it != ids_.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {
      ids->push_back(unk_id_);
      return;
    }
    pieces.push_back(found);
    begin = end;
  }
  ids->insert(ids->end(), pieces.begin(), pieces.end());
}

std::vector<int32_t> WordPiece::Encode(std::string_view text) const {
  std::vector<int32_t> ids;
  for (const std::string& word : BasicTokenize(text)) AppendWord(word, &ids);
  return ids;
}

std::string WordPiece::Decode(const std::vector<int32_t>& ids) const {
  std::string text;
  const std::string& prefix = options_.continuation;
  for (const int32_t id : ids) {
    const std::string& piece = Piece(id);
    if (!text.empty() && piece.compare(0, prefix.size(), prefix) == 0) {
      text += piece.substr(prefix.size());
    } else {
      if (!text.empty()) text += ' ';
      text += piece;
    }
  }
  return text;
}

}  // namespace docmatch::data
