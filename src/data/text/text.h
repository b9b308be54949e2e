// Text handling for `prepare`: UTF-8 validation and repair, paragraph
// splitting, and sentence segmentation with ICU's BreakIterator.
//
// Paragraphs are separated by blank lines (the corpus convention); inside a
// paragraph every run of white space, line breaks included, becomes one space,
// because source files wrap lines at arbitrary columns. Sentence boundaries come
// from ICU's rule-based sentence iterator (Unicode UAX #29) filtered by the
// locale's abbreviation suppressions (CLDR: no break after "Mr.", "U.S.",
// "e.g." ...), to which English adds titles ICU lacks ("Dr.", "St.", "Fig.").
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unicode/uversion.h>  // ICU's versioned namespace, for the declaration below

U_NAMESPACE_BEGIN
class BreakIterator;
U_NAMESPACE_END

namespace docmatch::data {

// Number of ill-formed UTF-8 sequences in `text` (0 = valid UTF-8).
int CountInvalidUtf8(std::string_view text);

// `text` with each ill-formed UTF-8 sequence replaced by U+FFFD.
std::string RepairUtf8(std::string_view text);

// Splits on blank lines (lines holding only white space) and collapses white
// space inside each paragraph; empty paragraphs are dropped.
std::vector<std::string> SplitParagraphs(std::string_view text);

// Sentence segmentation of one paragraph (valid UTF-8). Not thread-safe: make
// one per thread (they are cheap to copy: the copy clones the iterator).
class SentenceSegmenter {
 public:
  // `locale`: an ICU locale id, e.g. "en", "de", "ja".
  explicit SentenceSegmenter(const std::string& locale = "en");
  SentenceSegmenter(const SentenceSegmenter& other);
  SentenceSegmenter& operator=(const SentenceSegmenter&) = delete;
  ~SentenceSegmenter();

  // Sentences of `paragraph`, trimmed, empty ones dropped, in order.
  std::vector<std::string> Split(std::string_view paragraph) const;

 private:
  std::unique_ptr<icu::BreakIterator> iterator_;
};

// The words of a text for lexical retrieval (BM25, data/corpus/word_counts.h):
// ICU's word boundaries (UAX #29), keeping the segments ICU marks as words
// (letters, numbers, kana, ideographs; not punctuation or spaces), each
// lower-cased (Unicode's full case mapping, root locale); one longer than
// kMaxWordBytes (data/corpus/word_counts.h) is left out. Not thread-safe:
// one per thread, as SentenceSegmenter.
class WordSegmenter {
 public:
  explicit WordSegmenter(const std::string& locale = "en");
  WordSegmenter(const WordSegmenter& other);
  WordSegmenter& operator=(const WordSegmenter&) = delete;
  ~WordSegmenter();

  // Appends the words of `text` (valid UTF-8), in order, to `words`.
  void Split(std::string_view text, std::vector<std::string>* words) const;

 private:
  std::unique_ptr<icu::BreakIterator> iterator_;
};

// Each distinct word of `words` with its count, in order of first appearance.
std::vector<std::pair<std::string, int32_t>> CountWords(const std::vector<std::string>& words);

}  // namespace docmatch::data
