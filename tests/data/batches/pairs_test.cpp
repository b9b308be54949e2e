// Labelled pair files (data/batches/pairs.h).
#include "data/batches/pairs.h"

#include <gtest/gtest.h>

#include <functional>

#include "../test_corpus.h"

namespace docmatch::data {
namespace {

// What `read` throws, or "" when it does not.
std::string Thrown(const std::function<void()>& read) {
  try {
    read();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string ErrorOf(const std::string& path, const Corpus& corpus) {
  return Thrown([&] { ReadPairs(path, corpus); });
}

// A 10-document corpus (doc-0 ... doc-9) to name pairs in.
class Pairs : public ::testing::Test {
 protected:
  static std::string Prepared(const testing::ScratchDir& dir) {
    testing::WriteSyntheticCorpus(dir.File("corpus"), {5, 5});
    return dir.File("corpus");
  }
  testing::ScratchDir dir{"pairs"};
  const Corpus corpus{Prepared(dir)};
};

TEST_F(Pairs, ReadsIdsAsCorpusIndicesAndNamesEveryBadLine) {
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

TEST_F(Pairs, RefusesAPairWithTwoLabelsAndAFileOfSelfPairs) {
  // The same pair, in the other order, labelled 0 three lines later.
  testing::WriteFile(dir.File("both.jsonl"),
                     "{\"source\": \"doc-1\", \"target\": \"doc-7\", \"label\": 1}\n"
                     "{\"source\": \"doc-2\", \"target\": \"doc-3\", \"label\": 0}\n"
                     "{\"source\": \"doc-1\", \"target\": \"doc-7\", \"label\": 1}\n"
                     "{\"source\": \"doc-7\", \"target\": \"doc-1\", \"label\": 0}\n");
  const std::string error = ErrorOf(dir.File("both.jsonl"), corpus);
  EXPECT_NE(error.find("both.jsonl:4: \"doc-7\" and \"doc-1\" are labelled 0 here and 1 at "), std::string::npos)
      << error;
  EXPECT_NE(error.find("both.jsonl:1"), std::string::npos) << error;
  // A repeated pair with the same label is kept twice (a weighting).
  testing::WriteFile(dir.File("repeated.jsonl"),
                     "{\"source\": \"doc-1\", \"target\": \"doc-7\", \"label\": 1}\n"
                     "{\"source\": \"doc-7\", \"target\": \"doc-1\", \"label\": 1}\n");
  EXPECT_EQ(ReadPairs(dir.File("repeated.jsonl"), corpus).size(), 2u);

  testing::WriteFile(dir.File("self.jsonl"),
                     "{\"source\": \"doc-1\", \"target\": \"doc-1\", \"label\": 1}\n"
                     "{\"source\": \"doc-4\", \"target\": \"doc-4\", \"label\": 0}\n");
  EXPECT_NE(ErrorOf(dir.File("self.jsonl"), corpus).find("every pair (2) pairs a document with itself"),
            std::string::npos)
      << ErrorOf(dir.File("self.jsonl"), corpus);
  // One self-pair among others is read (with a warning).
  testing::WriteFile(dir.File("some-self.jsonl"),
                     "{\"source\": \"doc-1\", \"target\": \"doc-1\", \"label\": 1}\n"
                     "{\"source\": \"doc-2\", \"target\": \"doc-3\", \"label\": 1}\n"
                     "{\"source\": \"doc-4\", \"target\": \"doc-5\", \"label\": 0}\n");
  EXPECT_EQ(ReadPairs(dir.File("some-self.jsonl"), corpus).size(), 3u);
  // Related pairs that are all self-pairs, beside unrelated ones, say nothing
  // of which other document matches (issue 64, row 7).
  testing::WriteFile(dir.File("self-positives.jsonl"),
                     "{\"source\": \"doc-1\", \"target\": \"doc-1\", \"label\": 1}\n"
                     "{\"source\": \"doc-4\", \"target\": \"doc-5\", \"label\": 0}\n");
  EXPECT_NE(ErrorOf(dir.File("self-positives.jsonl"), corpus).find("every related pair (label 1, 1 of them) pairs"),
            std::string::npos)
      << ErrorOf(dir.File("self-positives.jsonl"), corpus);
}

std::string RelevanceErrorOf(const std::string& path, const Corpus& corpus) {
  return Thrown([&] { ReadRelevance(path, corpus); });
}

TEST_F(Pairs, RelevanceFromJsonlBeirAndTrecQrelsWithGrades) {
  // The same judgements in the four shapes: doc-1 -> doc-2 (grade 2), doc-3
  // (grade 1), doc-4 (grade 0: judged, not relevant); doc-5 -> doc-6.
  testing::WriteFile(dir.File("graded.jsonl"),
                     "{\"query\": \"doc-1\", \"relevant\": {\"doc-2\": 2, \"doc-3\": 1, \"doc-4\": 0}}\n"
                     "{\"query\": \"doc-5\", \"relevant\": [\"doc-6\"]}\n");
  testing::WriteFile(
      dir.File("beir.tsv"),
      "query-id\tcorpus-id\tscore\ndoc-1\tdoc-2\t2\ndoc-1\tdoc-3\t1\r\ndoc-1\tdoc-4\t0\n\ndoc-5\tdoc-6\t1\n");
  testing::WriteFile(dir.File("trec.qrels"), "doc-1 0 doc-2 2\ndoc-1 0 doc-3 1\ndoc-1 0 doc-4 0\ndoc-5 0 doc-6 1\n");
  const Relevance expected = {{1, {{2, 2}, {3, 1}, {4, 0}}}, {5, {{6, 1}}}};
  for (const char* name : {"graded.jsonl", "beir.tsv", "trec.qrels"}) {
    EXPECT_EQ(ReadRelevance(dir.File(name), corpus), expected) << name;
  }
  EXPECT_EQ(RelevantDocuments(expected.at(1)), (std::vector<int64_t>{2, 3}));
  // The two ungraded shapes give grade 1.
  testing::WriteFile(dir.File("lists.jsonl"),
                     "{\"query\": \"doc-1\", \"relevant\": [\"doc-2\", \"doc-3\"]}\n"
                     "{\"source\": \"doc-5\", \"target\": \"doc-6\"}\n"
                     "{\"source\": \"doc-5\", \"target\": \"doc-7\", \"label\": 0}\n");
  EXPECT_EQ(ReadRelevance(dir.File("lists.jsonl"), corpus), (Relevance{{1, {{2, 1}, {3, 1}}}, {5, {{6, 1}}}}));
  // A query judged only 0 stays listed, with nothing relevant.
  testing::WriteFile(dir.File("zero.tsv"), "doc-1\tdoc-2\t1\ndoc-8\tdoc-9\t0\n");
  EXPECT_TRUE(RelevantDocuments(ReadRelevance(dir.File("zero.tsv"), corpus).at(8)).empty());

  // Errors name the file and line.
  testing::WriteFile(dir.File("twice.tsv"), "doc-1\tdoc-2\t1\ndoc-1\tdoc-2\t2\n");
  EXPECT_NE(RelevanceErrorOf(dir.File("twice.tsv"), corpus)
                .find("twice.tsv:2: this query and document are judged 2 "
                      "here and 1 at"),
            std::string::npos)
      << RelevanceErrorOf(dir.File("twice.tsv"), corpus);
  testing::WriteFile(dir.File("fraction.tsv"), "doc-1\tdoc-2\t0.5\n");
  EXPECT_NE(
      RelevanceErrorOf(dir.File("fraction.tsv"), corpus).find("fraction.tsv:1: the grade \"0.5\" is not an integer"),
      std::string::npos);
  testing::WriteFile(dir.File("unknown.tsv"), "doc-1\tdoc-2\t1\ndoc-1\tnope\t1\n");
  EXPECT_NE(
      RelevanceErrorOf(dir.File("unknown.tsv"), corpus).find("unknown.tsv:2: document \"nope\" is not a document"),
      std::string::npos)
      << RelevanceErrorOf(dir.File("unknown.tsv"), corpus);
  testing::WriteFile(dir.File("fields.tsv"), "doc-1 doc-2\n");
  EXPECT_NE(RelevanceErrorOf(dir.File("fields.tsv"), corpus).find("fields.tsv:1: expected BEIR's `query-id<TAB>corpus-id<TAB>score` or TREC's"),
            std::string::npos);
  testing::WriteFile(dir.File("nothing.tsv"), "query-id\tcorpus-id\tscore\ndoc-1\tdoc-2\t0\n");
  EXPECT_NE(RelevanceErrorOf(dir.File("nothing.tsv"), corpus).find("holds no query with a relevant document"),
            std::string::npos);
}

}  // namespace
}  // namespace docmatch::data
