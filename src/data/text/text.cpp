// UTF-8 checks and repair, paragraph splitting and ICU sentence segmentation
// (text.h).
#include "data/text/text.h"

#include <glog/logging.h>
#include <unicode/brkiter.h>
#include <unicode/filteredbrk.h>
#include <unicode/locid.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>
#include <unicode/utext.h>

#include <cctype>
#include <stdexcept>
#include <unordered_map>

#include "console/error.h"
#include "data/corpus/word_counts.h"

namespace docmatch::data {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Appends `line` to `paragraph`, collapsing white space runs into one space.
void AppendCollapsed(std::string_view line, std::string* paragraph) {
  bool pending_space = !paragraph->empty();
  for (char c : line) {
    if (IsSpace(c)) {
      pending_space = !paragraph->empty();
      continue;
    }
    if (pending_space) paragraph->push_back(' ');
    pending_space = false;
    paragraph->push_back(c);
  }
}

// Titles and reference abbreviations that ICU's English suppression list
// (ICU 72) lacks but that encyclopedic text is full of: "Dr. Smith", "St. Paul",
// "Fig. 3". Words that often end sentences ("etc.", "Jr.") are left out.
constexpr const char* kExtraEnglishAbbreviations[] = {"Dr.",  "St.", "Mt.",  "Ft.",     "Gen.", "Gov.", "Sen.",  "Rep.",
                                                      "Col.", "Lt.", "Sgt.", "Capt.",   "Rev.", "Fig.", "Figs.", "Eq.",
                                                      "Vol.", "pp.", "cf.",  "approx.", "ca.",  "vs."};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

int CountInvalidUtf8(std::string_view text) {
  if (text.empty()) return 0;
  UErrorCode status = U_ZERO_ERROR;
  int32_t length = 0;
  int32_t substitutions = 0;
  // Preflight into no buffer: ICU counts the substitutions it would make.
  u_strFromUTF8WithSub(nullptr, 0, &length, text.data(), static_cast<int32_t>(text.size()),
                       /*subchar=*/0xFFFD, &substitutions, &status);
  if (status != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(status)) {
    throw Error("data", std::string("ICU could not read a text as UTF-8: ") + u_errorName(status));
  }
  return substitutions;
}

std::string RepairUtf8(std::string_view text) {
  // fromUTF8 substitutes U+FFFD for every ill-formed sequence.
  icu::UnicodeString unicode =
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  std::string repaired;
  unicode.toUTF8String(repaired);
  return repaired;
}

std::vector<std::string> SplitParagraphs(std::string_view text) {
  std::vector<std::string> paragraphs;
  std::string current;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (Trim(line).empty()) {
      if (!current.empty()) paragraphs.push_back(std::move(current));
      current.clear();
    } else {
      AppendCollapsed(line, &current);
    }
    pos = end + 1;
  }
  if (!current.empty()) paragraphs.push_back(std::move(current));
  return paragraphs;
}

SentenceSegmenter::SentenceSegmenter(const std::string& locale) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Locale icu_locale(locale.c_str());
  // The locale's own abbreviation list (CLDR "standard" suppressions) ...
  std::unique_ptr<icu::FilteredBreakIteratorBuilder> builder(
      icu::FilteredBreakIteratorBuilder::createInstance(icu_locale, status));
  if (U_FAILURE(status)) {
    throw Error("data", "ICU has no sentence suppressions for locale '" + locale + "': " + u_errorName(status));
  }
  // ... plus the ones it lacks, for English.
  if (locale.rfind("en", 0) == 0) {
    for (const char* abbreviation : kExtraEnglishAbbreviations) {
      builder->suppressBreakAfter(icu::UnicodeString::fromUTF8(abbreviation), status);
    }
  }
  icu::BreakIterator* sentences = icu::BreakIterator::createSentenceInstance(icu_locale, status);
  if (U_FAILURE(status) || !sentences) {
    throw Error("data", "ICU could not make a sentence iterator for locale '" + locale + "': " + u_errorName(status));
  }
  iterator_.reset(builder->wrapIteratorWithFilter(sentences, status));
  if (U_FAILURE(status)) {
    throw Error("data", std::string("ICU filtered sentence iterator: ") + u_errorName(status));
  }
}

SentenceSegmenter::SentenceSegmenter(const SentenceSegmenter& other) : iterator_(other.iterator_->clone()) {}

SentenceSegmenter::~SentenceSegmenter() = default;

std::vector<std::string> SentenceSegmenter::Split(std::string_view paragraph) const {
  std::vector<std::string> sentences;
  if (paragraph.empty()) return sentences;
  UErrorCode status = U_ZERO_ERROR;
  // UText over the UTF-8 bytes: boundaries come back as byte offsets, no copy.
  UText* text = utext_openUTF8(nullptr, paragraph.data(), static_cast<int64_t>(paragraph.size()), &status);
  if (U_FAILURE(status)) throw Error("data", std::string("ICU could not open a paragraph: ") + u_errorName(status));
  iterator_->setText(text, status);
  if (U_FAILURE(status)) {
    utext_close(text);
    throw Error("data", std::string("ICU could not segment a paragraph: ") + u_errorName(status));
  }
  int32_t begin = iterator_->first();
  for (int32_t end = iterator_->next(); end != icu::BreakIterator::DONE; begin = end, end = iterator_->next()) {
    std::string_view sentence = Trim(paragraph.substr(begin, end - begin));
    if (!sentence.empty()) sentences.emplace_back(sentence);
  }
  utext_close(text);
  return sentences;
}

WordSegmenter::WordSegmenter(const std::string& locale) {
  UErrorCode status = U_ZERO_ERROR;
  iterator_.reset(icu::BreakIterator::createWordInstance(icu::Locale(locale.c_str()), status));
  if (U_FAILURE(status) || !iterator_) {
    throw Error("data", "ICU could not make a word iterator for locale '" + locale + "': " + u_errorName(status));
  }
}

WordSegmenter::WordSegmenter(const WordSegmenter& other) : iterator_(other.iterator_->clone()) {}

WordSegmenter::~WordSegmenter() = default;

void WordSegmenter::Split(std::string_view text, std::vector<std::string>* words) const {
  if (text.empty()) return;
  UErrorCode status = U_ZERO_ERROR;
  UText* utext = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status);
  if (U_FAILURE(status)) throw Error("data", std::string("ICU could not open a text: ") + u_errorName(status));
  iterator_->setText(utext, status);
  if (U_FAILURE(status)) {
    utext_close(utext);
    throw Error("data", std::string("ICU could not segment a text into words: ") + u_errorName(status));
  }
  int32_t begin = iterator_->first();
  for (int32_t end = iterator_->next(); end != icu::BreakIterator::DONE; begin = end, end = iterator_->next()) {
    // The rule status of the segment just passed: UBRK_WORD_NONE (spaces,
    // punctuation) is below UBRK_WORD_NONE_LIMIT.
    if (iterator_->getRuleStatus() < UBRK_WORD_NONE_LIMIT) continue;
    const std::string_view piece = text.substr(begin, end - begin);
    icu::UnicodeString word =
        icu::UnicodeString::fromUTF8(icu::StringPiece(piece.data(), static_cast<int32_t>(piece.size())));
    word.toLower(icu::Locale::getRoot());
    std::string lowered;
    word.toUTF8String(lowered);
    if (lowered.size() <= kMaxWordBytes) words->push_back(std::move(lowered));
  }
  utext_close(utext);
}

std::vector<std::pair<std::string, int32_t>> CountWords(const std::vector<std::string>& words) {
  std::vector<std::pair<std::string, int32_t>> counts;
  std::unordered_map<std::string_view, size_t> index;
  for (const std::string& word : words) {
    const auto [it, added] = index.emplace(word, counts.size());
    if (added) counts.emplace_back(word, 0);
    ++counts[it->second].second;
  }
  return counts;
}

}  // namespace docmatch::data
