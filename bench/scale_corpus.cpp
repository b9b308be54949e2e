// A pre-training-scale corpus from a real one, for the streaming benchmark
// (the SMITH collection is ~700K documents; Wikispeedia has 4,598).
//
// Each new document copies the shape of a source document drawn uniformly
// (its paragraphs and sentences per paragraph, so the length distribution is
// the real one) and fills every sentence slot with a real tokenized sentence
// drawn uniformly from the whole source corpus. The source's tokens stay in
// memory (Wikispeedia: 20M tokens, 80 MB); shards are written one at a time.
//   scale_corpus --source corpora/wikispeedia --output /tmp/scale-700k --documents 700000
#include <CLI/CLI.hpp>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <random>

#include "data/corpus/corpus.h"
#include "data/corpus/shard_writer.h"

namespace fs = std::filesystem;
using docmatch::data::Document;

int main(int argc, char** argv) {
  CLI::App app{"Resample a prepared corpus into a larger one with the same length distribution (JSON on stdout)"};
  std::string source_dir, output_dir;
  int64_t documents = 700000, per_shard = 4096;
  uint64_t seed = 1;
  app.add_option("--source", source_dir, "prepared corpus to draw from")->required()->check(CLI::ExistingDirectory);
  app.add_option("--output", output_dir, "new corpus folder (must not exist)")->required();
  app.add_option("--documents", documents, "documents to write")->capture_default_str();
  app.add_option("--documents-per-shard", per_shard, "documents per shard")->capture_default_str();
  app.add_option("--seed", seed, "draws")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (fs::exists(output_dir)) {
    std::cerr << "scale_corpus: " << output_dir << " exists; give a new folder" << std::endl;
    return 1;
  }
  const auto start = std::chrono::steady_clock::now();
  const docmatch::data::Corpus source(source_dir);
  // Every source sentence as (start, end) into one token pool; every source
  // document's shape as its sentences-per-paragraph list.
  std::vector<int32_t> pool;
  std::vector<std::pair<int64_t, int64_t>> sentences;
  std::vector<std::vector<int64_t>> shapes;
  for (int64_t i = 0; i < source.num_documents(); ++i) {
    const Document d = source.Get(i);
    for (int64_t s = 0; s < d.num_sentences(); ++s) {
      sentences.emplace_back(pool.size() + d.sentence_offsets[s], pool.size() + d.sentence_offsets[s + 1]);
    }
    pool.insert(pool.end(), d.tokens.begin(), d.tokens.end());
    std::vector<int64_t> shape;
    for (int64_t p = 0; p < d.num_paragraphs(); ++p)
      shape.push_back(d.paragraph_offsets[p + 1] - d.paragraph_offsets[p]);
    if (!shape.empty()) shapes.push_back(std::move(shape));
  }

  fs::create_directories(output_dir);
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<size_t> pick_shape(0, shapes.size() - 1), pick_sentence(0, sentences.size() - 1);
  docmatch::data::Manifest manifest;
  manifest.tokenizer_hash = source.manifest().tokenizer_hash;
  manifest.vocab_size = source.manifest().vocab_size;
  for (int64_t first = 0; first < documents; first += per_shard) {
    const std::string file = "shard-" + std::to_string(100000 + first / per_shard).substr(1) + ".h5";
    docmatch::data::ShardWriter writer(output_dir + "/" + file, manifest.tokenizer_hash,
                                       static_cast<int>(manifest.vocab_size));
    for (int64_t i = first; i < std::min(documents, first + per_shard); ++i) {
      Document d;
      d.id = "scaled-" + std::to_string(i);
      d.sentence_offsets = {0};
      d.paragraph_offsets = {0};
      for (int64_t count : shapes[pick_shape(random)]) {
        for (int64_t s = 0; s < count; ++s) {
          const auto [begin, end] = sentences[pick_sentence(random)];
          d.tokens.insert(d.tokens.end(), pool.begin() + begin, pool.begin() + end);
          d.sentence_offsets.push_back(static_cast<int64_t>(d.tokens.size()));
        }
        d.paragraph_offsets.push_back(static_cast<int64_t>(d.sentence_offsets.size()) - 1);
      }
      writer.Add(d);
    }
    const docmatch::data::ShardCounts counts = writer.Close();
    manifest.shards.push_back({file, counts});
    manifest.totals.documents += counts.documents;
    manifest.totals.paragraphs += counts.paragraphs;
    manifest.totals.sentences += counts.sentences;
    manifest.totals.tokens += counts.tokens;
  }
  fs::copy_file(source.tokenizer_path(), output_dir + "/" + docmatch::data::kTokenizerFile);
  manifest.report = {{"scaled_from", source_dir}, {"seed", seed}};
  manifest.Save(output_dir);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << nlohmann::json{{"bench", "scale_corpus"},
                              {"source", source_dir},
                              {"output", output_dir},
                              {"documents", manifest.totals.documents},
                              {"tokens", manifest.totals.tokens},
                              {"tokens_per_document", static_cast<double>(manifest.totals.tokens) / documents},
                              {"source_tokens_per_document",
                               static_cast<double>(source.manifest().totals.tokens) / source.num_documents()},
                              {"shards", manifest.shards.size()},
                              {"seconds", seconds}}
                   .dump()
            << std::endl;
  return 0;
}
