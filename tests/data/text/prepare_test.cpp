// `prepare` end to end on small inputs: structure, determinism, and every
// bad-input case with its error or its count (data/text/prepare.h).
#include "data/text/prepare.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "../test_corpus.h"
#include "data/corpus/corpus.h"
#include "data/text/corpus_reader.h"

namespace docmatch::data {
namespace {
namespace fs = std::filesystem;

std::string JsonLine(const std::string& id, const std::string& text) {
  return nlohmann::json{{"id", id}, {"text", text}}.dump() + "\n";
}

// Eight documents of 3 paragraphs of 4 sentences each (enough text to train a
// tokenizer on), with ids d0..d7.
std::string CleanDocuments(std::vector<std::vector<std::vector<std::string>>>* structure = nullptr) {
  const std::vector<std::string> sentences = testing::SyntheticSentences(96);
  std::string jsonl;
  for (int d = 0; d < 8; ++d) {
    std::string text;
    std::vector<std::vector<std::string>> paragraphs;
    for (int p = 0; p < 3; ++p) {
      std::vector<std::string> paragraph(sentences.begin() + d * 12 + p * 4, sentences.begin() + d * 12 + p * 4 + 4);
      // Capitalised so ICU sees sentence starts; wrapped over lines like real files.
      for (auto& s : paragraph) s[0] = static_cast<char>(std::toupper(s[0]));
      text += paragraph[0] + " " + paragraph[1] + "\n  " + paragraph[2] + " " + paragraph[3] + "\n\n";
      paragraphs.push_back(paragraph);
    }
    if (structure) structure->push_back(paragraphs);
    jsonl += JsonLine("d" + std::to_string(d), text);
  }
  return jsonl;
}

PrepareOptions Options(const testing::ScratchDir& dir) {
  PrepareOptions o;
  o.input = dir.File("in.jsonl");
  o.output = dir.File("corpus");
  o.tokenizer.vocab_size = 100;
  o.documents_per_shard = 3;
  o.progress = false;
  return o;
}

std::string ErrorOf(const PrepareOptions& options) {
  try {
    Prepare(options);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Prepare, KeepsParagraphsAndSentencesAndRoundTripsText) {
  testing::ScratchDir dir("prepare");
  std::vector<std::vector<std::vector<std::string>>> structure;
  testing::WriteFile(dir.File("in.jsonl"), CleanDocuments(&structure));
  const PrepareReport report = Prepare(Options(dir));
  EXPECT_EQ(report.totals.documents, 8);
  EXPECT_EQ(report.totals.paragraphs, 24);
  EXPECT_EQ(report.totals.sentences, 96);
  EXPECT_EQ(report.shards, 3);  // 3 + 3 + 2 documents
  EXPECT_TRUE(report.tallies.empty());

  const Corpus corpus(dir.File("corpus"));
  const Tokenizer tokenizer = Tokenizer::Load(corpus.tokenizer_path());
  EXPECT_EQ(corpus.manifest().tokenizer_hash, tokenizer.hash());
  EXPECT_EQ(corpus.num_documents(), 8);
  for (int d = 0; d < 8; ++d) {
    const Document doc = corpus.Get(d);
    EXPECT_EQ(doc.id, "d" + std::to_string(d));
    ASSERT_EQ(doc.num_paragraphs(), 3);
    for (int p = 0; p < 3; ++p) {
      ASSERT_EQ(doc.paragraph_offsets[p + 1] - doc.paragraph_offsets[p], 4);
      for (int s = 0; s < 4; ++s) {
        EXPECT_EQ(tokenizer.Decode(doc.Sentence(doc.paragraph_offsets[p] + s)), structure[d][p][s]);
      }
    }
  }
}

TEST(Prepare, OutputDoesNotDependOnThreadCountAndReusesAGivenTokenizer) {
  testing::ScratchDir dir("prepare");
  testing::WriteFile(dir.File("in.jsonl"), CleanDocuments());
  PrepareOptions one = Options(dir);
  one.threads = 1;
  Prepare(one);
  PrepareOptions many = Options(dir);
  many.output = dir.File("corpus2");
  many.threads = 4;
  many.tokenizer_model = dir.File("corpus/tokenizer.model");
  const PrepareReport report = Prepare(many);
  EXPECT_FALSE(report.tokenizer_trained);
  const Corpus a(one.output), b(many.output);
  EXPECT_EQ(a.manifest().tokenizer_hash, b.manifest().tokenizer_hash);
  ASSERT_EQ(a.num_documents(), b.num_documents());
  for (int64_t i = 0; i < a.num_documents(); ++i) {
    EXPECT_EQ(a.Get(i).tokens, b.Get(i).tokens);
    EXPECT_EQ(a.Get(i).sentence_offsets, b.Get(i).sentence_offsets);
  }
}

TEST(Prepare, CountsRepairedEmptyAndTruncatedDocuments) {
  testing::ScratchDir dir("prepare");
  std::string long_text;
  for (const auto& s : testing::SyntheticSentences(400, 11)) long_text += s + " ";
  // "long" first: the clean documents exceed the cap too, and samples keep the first five.
  testing::WriteFile(dir.File("in.jsonl"), JsonLine("long", long_text) + CleanDocuments() + JsonLine("empty", "") +
                                               JsonLine("blank", " \n\n \t ") +
                                               // raw bytes: an invalid UTF-8 byte inside the JSON string
                                               "{\"id\": \"bad-utf8\", \"text\": \"The river \xff flows north.\"}\n");
  PrepareOptions o = Options(dir);
  o.max_document_tokens = 50;
  const PrepareReport report = Prepare(o);
  EXPECT_EQ(report.input_documents, 12);
  EXPECT_EQ(report.totals.documents, 10);
  EXPECT_EQ(report.tallies.at("empty").count, 2);
  EXPECT_EQ(report.tallies.at("empty").sample_ids, (std::vector<std::string>{"empty", "blank"}));
  EXPECT_EQ(report.tallies.at("repaired_utf8").count, 1);
  EXPECT_EQ(report.tallies.at("repaired_utf8").sample_ids.front(), "bad-utf8");
  EXPECT_GE(report.tallies.at("truncated").count, 1);  // "long", maybe some clean ones too
  const Corpus corpus(o.output);
  const int64_t long_index = *corpus.IndexOf("long");
  EXPECT_EQ(corpus.Get(long_index).num_tokens(), 50);
  EXPECT_NE(std::find(report.tallies.at("truncated").sample_ids.begin(),
                      report.tallies.at("truncated").sample_ids.end(), "long"),
            report.tallies.at("truncated").sample_ids.end());
  EXPECT_TRUE(corpus.IndexOf("bad-utf8").has_value());
  EXPECT_FALSE(corpus.IndexOf("empty").has_value());
  // The report travels in the manifest.
  EXPECT_EQ(corpus.manifest().report["skipped_or_changed"]["empty"]["count"], 2);

  o.invalid_utf8 = InvalidUtf8Policy::kSkip;
  o.overwrite = true;
  const PrepareReport skipped = Prepare(o);
  EXPECT_EQ(skipped.tallies.at("invalid_utf8").count, 1);
  EXPECT_EQ(skipped.tallies.count("repaired_utf8"), 0u);
  EXPECT_FALSE(Corpus(o.output).IndexOf("bad-utf8").has_value());
}

TEST(Prepare, EnormousDocumentIsCutBeforeSegmentation) {
  testing::ScratchDir dir("prepare");
  // 64 MB of text in one line: kept to the token cap, without segmenting it all.
  std::string huge;
  const auto sentences = testing::SyntheticSentences(50, 17);
  while (huge.size() < (64u << 20)) huge += sentences[huge.size() % 50] + " ";
  testing::WriteFile(dir.File("in.jsonl"), CleanDocuments() + JsonLine("huge", huge));
  PrepareOptions o = Options(dir);
  o.max_document_tokens = 1000;
  const auto start = std::chrono::steady_clock::now();
  const PrepareReport report = Prepare(o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(report.tallies.at("truncated").sample_ids.back(), "huge");
  const Corpus corpus(o.output);
  EXPECT_EQ(corpus.Get(*corpus.IndexOf("huge")).num_tokens(), 1000);
  // Loose bound: segmenting and encoding all 64 MB takes far longer here.
  EXPECT_LT(seconds, 30.0);
}

// A document over the cap keeps exactly the cap's worth of tokens and every
// sentence up to it, also when its raw text is long enough to be cut before
// segmentation (the old code kept only the first sentence then).
TEST(Prepare, LongDocumentKeepsEverySentenceUpToTheCap) {
  testing::ScratchDir dir("prepare");
  std::vector<std::string> sentences = testing::SyntheticSentences(2000, 23);
  for (auto& s : sentences) s[0] = static_cast<char>(std::toupper(s[0]));  // sentence starts for ICU
  std::string text;
  for (size_t i = 0; i < sentences.size(); ++i) text += sentences[i] + (i % 5 == 4 ? "\n\n" : " ");
  constexpr int64_t kCap = 300;
  ASSERT_GT(text.size(), static_cast<size_t>(kCap * 64));  // the raw cut fires too
  testing::WriteFile(dir.File("in.jsonl"), CleanDocuments() + JsonLine("long", text));
  PrepareOptions o = Options(dir);
  o.max_document_tokens = kCap;
  const PrepareReport report = Prepare(o);
  const auto& truncated = report.tallies.at("truncated").sample_ids;
  EXPECT_NE(std::find(truncated.begin(), truncated.end(), "long"), truncated.end());

  const Corpus corpus(o.output);
  const Tokenizer tokenizer = Tokenizer::Load(corpus.tokenizer_path());
  const Document doc = corpus.Get(*corpus.IndexOf("long"));
  ASSERT_EQ(doc.num_tokens(), kCap);
  ASSERT_GT(doc.num_sentences(), 10);
  // Every sentence but the last is whole and in order; the last is a prefix
  // of the next input sentence, cut at the cap.
  int64_t expected_tokens = 0;
  for (int64_t s = 0; s + 1 < doc.num_sentences(); ++s) {
    EXPECT_EQ(tokenizer.Decode(doc.Sentence(s)), sentences[s]) << "sentence " << s;
    expected_tokens += static_cast<int64_t>(tokenizer.Encode(sentences[s]).size());
  }
  const int64_t last = doc.num_sentences() - 1;
  const std::vector<int32_t> whole = tokenizer.Encode(sentences[last]);
  const std::vector<int32_t> kept = doc.Sentence(last);
  ASSERT_LE(kept.size(), whole.size());
  EXPECT_TRUE(std::equal(kept.begin(), kept.end(), whole.begin()));
  EXPECT_EQ(expected_tokens + static_cast<int64_t>(kept.size()), kCap);
  // Paragraphs of five sentences survive up to the cap.
  EXPECT_EQ(doc.num_paragraphs(), (doc.num_sentences() + 4) / 5);
}

TEST(Prepare, DuplicateIdIsAnErrorNamingBothLines) {
  testing::ScratchDir dir("prepare");
  testing::WriteFile(dir.File("in.jsonl"), CleanDocuments() + JsonLine("d3", "Again."));
  const std::string error = ErrorOf(Options(dir));
  EXPECT_NE(error.find("in.jsonl:9"), std::string::npos) << error;
  EXPECT_NE(error.find("in.jsonl:4"), std::string::npos) << error;
  EXPECT_NE(error.find("duplicate"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(dir.File("corpus/manifest.json")));
}

TEST(Prepare, MissingTextOrBrokenJsonIsAnErrorNamingTheLine) {
  testing::ScratchDir dir("prepare");
  testing::WriteFile(dir.File("in.jsonl"), JsonLine("a", "Fine.") + "\n{\"id\": \"b\", \"body\": \"x\"}\n");
  std::string error = ErrorOf(Options(dir));
  EXPECT_NE(error.find("in.jsonl:3"), std::string::npos) << error;  // blank line 2 is allowed
  EXPECT_NE(error.find("\"text\""), std::string::npos) << error;
  EXPECT_NE(error.find("\"b\""), std::string::npos) << error;

  testing::WriteFile(dir.File("in.jsonl"), JsonLine("a", "Fine.") + "{\"id\": \"b\", \"text\": \"unterminated\n");
  error = ErrorOf(Options(dir));
  EXPECT_NE(error.find("in.jsonl:2"), std::string::npos) << error;
  EXPECT_NE(error.find("JSON"), std::string::npos) << error;
}

TEST(Prepare, RefusesToOverwriteACorpusUnlessAsked) {
  testing::ScratchDir dir("prepare");
  testing::WriteFile(dir.File("in.jsonl"), CleanDocuments());
  Prepare(Options(dir));
  const std::string error = ErrorOf(Options(dir));
  EXPECT_NE(error.find("--overwrite"), std::string::npos) << error;
  PrepareOptions o = Options(dir);
  o.overwrite = true;
  o.documents_per_shard = 100;
  EXPECT_EQ(Prepare(o).shards, 1);
  EXPECT_FALSE(fs::exists(dir.File("corpus/shard-00001.h5")));  // old shards are gone
  EXPECT_EQ(Corpus(o.output).num_shards(), 1);
}

TEST(Prepare, ReadsAFolderOfTextFiles) {
  testing::ScratchDir dir("prepare");
  fs::create_directories(dir.File("texts"));
  const auto sentences = testing::SyntheticSentences(300, 3);
  for (int f = 0; f < 3; ++f) {
    std::string text;
    for (int s = 0; s < 100; ++s) text += sentences[f * 100 + s] + (s % 10 == 9 ? "\n\n" : " ");
    testing::WriteFile(dir.File("texts/file-" + std::to_string(f) + ".txt"), text);
  }
  testing::WriteFile(dir.File("texts/ignored.md"), "not a .txt file");
  PrepareOptions o = Options(dir);
  o.input = dir.File("texts");
  const PrepareReport report = Prepare(o);
  EXPECT_EQ(report.totals.documents, 3);
  EXPECT_EQ(report.totals.paragraphs, 30);
  const Corpus corpus(o.output);
  EXPECT_EQ(corpus.Get(0).id, "file-0");
  EXPECT_EQ(corpus.Get(2).id, "file-2");
}

TEST(Prepare, MissingInputLeavesTheOutputUntouched) {
  testing::ScratchDir dir("prepare");
  const std::string error = ErrorOf(Options(dir));
  EXPECT_NE(error.find("in.jsonl"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(dir.File("corpus")));
}

}  // namespace
}  // namespace docmatch::data
