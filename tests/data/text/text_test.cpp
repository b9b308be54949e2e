// Sentence segmentation, paragraph splitting and UTF-8 handling (data/text/text.h).
#include "data/text/text.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace docmatch::data {
namespace {

using Sentences = std::vector<std::string>;

TEST(SentenceSegmenter, KeepsAbbreviationsInsideSentences) {
  SentenceSegmenter segmenter("en");
  EXPECT_EQ(segmenter.Split("Dr. Smith met Mr. Jones in the lab. They talked for an hour."),
            (Sentences{"Dr. Smith met Mr. Jones in the lab.", "They talked for an hour."}));
  EXPECT_EQ(segmenter.Split("The U.S. economy grew. Exports rose."),
            (Sentences{"The U.S. economy grew.", "Exports rose."}));
  EXPECT_EQ(segmenter.Split("They prayed at St. Paul's. See Fig. 3 and e.g. the notes."),
            (Sentences{"They prayed at St. Paul's.", "See Fig. 3 and e.g. the notes."}));
}

TEST(SentenceSegmenter, DoesNotBreakInsideNumbers) {
  SentenceSegmenter segmenter("en");
  EXPECT_EQ(segmenter.Split("Absolute zero is -273.15 degrees. It cannot be reached."),
            (Sentences{"Absolute zero is -273.15 degrees.", "It cannot be reached."}));
}

TEST(SentenceSegmenter, KeepsClosingQuotesWithTheirSentence) {
  SentenceSegmenter segmenter("en");
  EXPECT_EQ(segmenter.Split("He said \"Stop it.\" Then he left."),
            (Sentences{"He said \"Stop it.\"", "Then he left."}));
  // UAX #29 rule SB8: after a full stop and closing quote, a lower-case word
  // continues the sentence.
  EXPECT_EQ(segmenter.Split("\u201CIt is over.\u201D she said. Nobody answered!"),
            (Sentences{"\u201CIt is over.\u201D she said.", "Nobody answered!"}));
  // After "?" the standard always breaks, lower case or not (a known limit of
  // UAX #29, kept rather than patched by hand).
  EXPECT_EQ(segmenter.Split("\u201CIs it over?\u201D She left."), (Sentences{"\u201CIs it over?\u201D", "She left."}));
}

TEST(SentenceSegmenter, SplitsNonLatinScripts) {
  SentenceSegmenter segmenter("en");
  // Japanese and Chinese full stops, the Devanagari danda, the Arabic question mark.
  EXPECT_EQ(segmenter.Split("今日は晴れです。明日は雨でしょう。"),
            (Sentences{"今日は晴れです。", "明日は雨でしょう。"}));
  EXPECT_EQ(segmenter.Split("我爱北京。你呢？"), (Sentences{"我爱北京。", "你呢？"}));
  EXPECT_EQ(segmenter.Split("यह पहला वाक्य है। यह दूसरा है।"), (Sentences{"यह पहला वाक्य है।", "यह दूसरा है।"}));
  EXPECT_EQ(segmenter.Split("هل أنت بخير؟ نعم أنا بخير."), (Sentences{"هل أنت بخير؟", "نعم أنا بخير."}));
  EXPECT_EQ(segmenter.Split("Это первое предложение. Это второе."),
            (Sentences{"Это первое предложение.", "Это второе."}));
}

TEST(SentenceSegmenter, HandlesEdgeCases) {
  SentenceSegmenter segmenter("en");
  EXPECT_TRUE(segmenter.Split("").empty());
  EXPECT_EQ(segmenter.Split("No final punctuation"), (Sentences{"No final punctuation"}));
  EXPECT_EQ(segmenter.Split("Why? Because! Yes."), (Sentences{"Why?", "Because!", "Yes."}));
  // A copy segments independently of the original (one per thread).
  SentenceSegmenter copy(segmenter);
  EXPECT_EQ(copy.Split("One. Two."), (Sentences{"One.", "Two."}));
}

// Words for BM25: ICU's word segments, punctuation and spaces left out,
// lower-cased; apostrophes inside a word and separators inside a number keep
// it whole (UAX #29). Expected lists written by hand.
TEST(WordSegmenter, KeepsWordsAndNumbersLowerCased) {
  const WordSegmenter segmenter;
  std::vector<std::string> words;
  segmenter.Split("Hello, World! It's 3.14 and 2,500 NA\u00CFVE caf\u00E9s -- (twice) twice.", &words);
  EXPECT_EQ(words, (std::vector<std::string>{"hello", "world", "it's", "3.14", "and", "2,500", "na\u00efve",
                                             "caf\u00e9s", "twice", "twice"}));
  words.clear();
  segmenter.Split("  ... !? -- ", &words);
  EXPECT_TRUE(words.empty());
  segmenter.Split("", &words);
  EXPECT_TRUE(words.empty());
  // Appends: a document's sentences one after another.
  segmenter.Split("One.", &words);
  segmenter.Split("Two one.", &words);
  EXPECT_EQ(words, (std::vector<std::string>{"one", "two", "one"}));
  EXPECT_EQ(CountWords(words), (std::vector<std::pair<std::string, int32_t>>{{"one", 2}, {"two", 1}}));
  // A copy segments alone (one per thread).
  const WordSegmenter copy(segmenter);
  std::vector<std::string> more;
  copy.Split("Straße STRASSE", &more);
  EXPECT_EQ(more, (std::vector<std::string>{"stra\u00dfe", "strasse"}));
}

TEST(SplitParagraphs, JoinsWrappedLinesAndSplitsOnBlankLines) {
  const std::string text =
      "\n   First paragraph wraps\n   over two lines.\n\n  \t \nSecond\tparagraph.\r\n\r\nThird.\n\n\n";
  EXPECT_EQ(SplitParagraphs(text),
            (std::vector<std::string>{"First paragraph wraps over two lines.", "Second paragraph.", "Third."}));
  EXPECT_TRUE(SplitParagraphs("  \n\n \t\n").empty());
  EXPECT_EQ(SplitParagraphs("single line"), (std::vector<std::string>{"single line"}));
}

TEST(Utf8, CountsAndRepairsIllFormedSequences) {
  EXPECT_EQ(CountInvalidUtf8("plain ascii"), 0);
  EXPECT_EQ(CountInvalidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), 0);  // é € 😀
  EXPECT_EQ(CountInvalidUtf8("bad \xff byte"), 1);
  EXPECT_EQ(CountInvalidUtf8("cut \xe2\x82"), 1);  // a truncated 3-byte sequence is one maximal subpart
  EXPECT_EQ(RepairUtf8("bad \xff byte"), "bad \xef\xbf\xbd byte");
  EXPECT_EQ(RepairUtf8("cut \xe2\x82"), "cut \xef\xbf\xbd");
  const std::string repaired = RepairUtf8(
      "a\xc0\xaf"
      "b");  // an overlong '/' is not a slash
  EXPECT_EQ(CountInvalidUtf8(repaired), 0);
  EXPECT_EQ(repaired.find('/'), std::string::npos);
}

}  // namespace
}  // namespace docmatch::data
