// Synthetic corpora with known contents written straight through ShardWriter,
// and scratch folders that clean up after themselves (test_corpus.h).
#include "test_corpus.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "data/corpus/random.h"
#include "data/corpus/shard_writer.h"

namespace docmatch::data::testing {
namespace fs = std::filesystem;

ScratchDir::ScratchDir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string unique = name;
  if (info) unique += std::string("-") + info->test_suite_name() + "-" + info->name();
  path_ = (fs::temp_directory_path() / ("docmatch-test-" + std::to_string(::getpid()) + "-" + unique)).string();
  fs::remove_all(path_);
  fs::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

Document SyntheticDocument(int64_t index, uint64_t seed) {
  KeyedRandom random(seed, {static_cast<uint64_t>(index)});
  Document d;
  d.index = index;
  d.id = "doc-" + std::to_string(index);
  d.title = index % 3 == 0 ? "" : "Title " + std::to_string(index);
  d.sentence_offsets = {0};
  d.paragraph_offsets = {0};
  const int paragraphs = 1 + static_cast<int>(random.Below(4));
  for (int p = 0; p < paragraphs; ++p) {
    const int sentences = 1 + static_cast<int>(random.Below(5));
    for (int s = 0; s < sentences; ++s) {
      const int tokens = 1 + static_cast<int>(random.Below(12));
      for (int t = 0; t < tokens; ++t) d.tokens.push_back(5 + static_cast<int32_t>(random.Below(1000)));
      d.sentence_offsets.push_back(d.num_tokens());
    }
    d.paragraph_offsets.push_back(d.num_sentences());
  }
  return d;
}

void AppendDocument(Document* document, const Document& more) {
  const int64_t tokens = document->num_tokens(), sentences = document->num_sentences();
  document->tokens.insert(document->tokens.end(), more.tokens.begin(), more.tokens.end());
  for (size_t s = 1; s < more.sentence_offsets.size(); ++s) {
    document->sentence_offsets.push_back(tokens + more.sentence_offsets[s]);
  }
  for (size_t p = 1; p < more.paragraph_offsets.size(); ++p) {
    document->paragraph_offsets.push_back(sentences + more.paragraph_offsets[p]);
  }
}

void WriteSyntheticCorpus(const std::string& directory, const std::vector<int64_t>& shard_sizes,
                          const std::string& tokenizer_hash, uint64_t seed) {
  fs::create_directories(directory);
  Manifest manifest;
  manifest.tokenizer_hash = tokenizer_hash;
  manifest.vocab_size = 1005;
  int64_t index = 0;
  for (size_t s = 0; s < shard_sizes.size(); ++s) {
    std::ostringstream name;
    name << "shard-" << std::setw(5) << std::setfill('0') << s << ".h5";
    ShardWriter writer(directory + "/" + name.str(), tokenizer_hash, 1005);
    for (int64_t i = 0; i < shard_sizes[s]; ++i) writer.Add(SyntheticDocument(index++, seed));
    const ShardCounts counts = writer.Close();
    manifest.shards.push_back({name.str(), counts});
    manifest.totals.documents += counts.documents;
    manifest.totals.paragraphs += counts.paragraphs;
    manifest.totals.sentences += counts.sentences;
    manifest.totals.tokens += counts.tokens;
  }
  manifest.Save(directory);
}

std::vector<std::string> SyntheticSentences(int count, uint64_t seed) {
  const std::vector<std::string> words = {
      "the",  "river", "flows", "north",  "into", "a",       "cold", "sea",  "where", "ships",    "once",    "sailed",
      "with", "salt",  "and",   "timber", "from", "forests", "of",   "pine", "near",  "mountain", "villages"};
  KeyedRandom random(seed, {});
  std::vector<std::string> sentences;
  for (int i = 0; i < count; ++i) {
    std::string s;
    const int length = 3 + static_cast<int>(random.Below(10));
    for (int w = 0; w < length; ++w) s += (w ? " " : "") + words[random.Below(words.size())];
    sentences.push_back(s + ".");
  }
  return sentences;
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

}  // namespace docmatch::data::testing
