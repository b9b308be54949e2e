// Labelled pair files (data/batches/pairs.h).
#include "data/batches/pairs.h"

#include <gtest/gtest.h>

#include "../test_corpus.h"

namespace docmatch::data {
namespace {

std::string ErrorOf(const std::string& path, const Corpus& corpus) {
  try {
    ReadPairs(path, corpus);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Pairs, ReadsIdsAsCorpusIndicesAndNamesEveryBadLine) {
  testing::ScratchDir dir("pairs");
  testing::WriteSyntheticCorpus(dir.File("corpus"), {5, 5});
  const Corpus corpus(dir.File("corpus"));
  testing::WriteFile(dir.File("ok.jsonl"),
                     "{\"source\": \"doc-1\", \"target\": \"doc-7\", \"label\": 1}\n\n"
                     "{\"source\": \"doc-9\", \"target\": \"doc-0\", \"label\": 0, \"jaccard\": 0.1}\n");
  const auto pairs = ReadPairs(dir.File("ok.jsonl"), corpus);
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0].source, 1);
  EXPECT_EQ(pairs[0].target, 7);
  EXPECT_EQ(pairs[0].label, 1.0f);
  EXPECT_EQ(pairs[1].source, 9);
  EXPECT_EQ(pairs[1].label, 0.0f);

  testing::WriteFile(dir.File("unknown.jsonl"),
                     "{\"source\": \"doc-1\", \"target\": \"doc-1\", \"label\": 1}\n"
                     "{\"source\": \"doc-2\", \"target\": \"nope\", \"label\": 1}\n");
  std::string error = ErrorOf(dir.File("unknown.jsonl"), corpus);
  EXPECT_NE(error.find("unknown.jsonl:2"), std::string::npos) << error;
  EXPECT_NE(error.find("\"nope\""), std::string::npos) << error;

  testing::WriteFile(dir.File("label.jsonl"), "{\"source\": \"doc-1\", \"target\": \"doc-2\", \"label\": 2}\n");
  EXPECT_NE(ErrorOf(dir.File("label.jsonl"), corpus).find("label.jsonl:1"), std::string::npos);
  testing::WriteFile(dir.File("field.jsonl"), "{\"source\": \"doc-1\", \"label\": 1}\n");
  EXPECT_NE(ErrorOf(dir.File("field.jsonl"), corpus).find("\"target\""), std::string::npos);
  EXPECT_NE(ErrorOf(dir.File("absent.jsonl"), corpus).find("absent.jsonl"), std::string::npos);
}

}  // namespace
}  // namespace docmatch::data
