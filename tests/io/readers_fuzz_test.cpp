// Seeded random-mutation fuzzing of every reader of user or disk input: the
// JSONL document reader, the pair and relevance reader, the manifest, the
// shard reader, safetensors, checkpoint archives and checksum records. Each
// target starts from a valid file, and each execution writes a mutant of it
// (bit flips, overwritten runs, truncation, inserted or duplicated bytes) and
// reads it back whole. A reader may accept a mutant or throw a
// std::exception; anything else (a crash, an abort, a hang) fails the run.
// The figures (executions, exceptions, accepted) are printed as one JSON line
// per target; a crash shows as this test binary failing, not as a figure.
//
// DOCMATCH_FUZZ_EXECUTIONS scales the executions per target (default 1.0).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <random>
#include <string>

#include "../data/test_corpus.h"
#include "data/batches/pairs.h"
#include "data/corpus/corpus.h"
#include "data/text/corpus_reader.h"
#include "io/checkpoint.h"
#include "io/checksums.h"
#include "io/safetensors.h"

namespace docmatch {
namespace {
namespace fs = std::filesystem;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// One to four edits of `seed`, each anywhere in the file; `region` narrows
// where they land (for a target whose damage of interest is in one part).
std::string Mutate(const std::string& seed, std::mt19937_64& rng, size_t region_begin = 0,
                   size_t region_end = std::string::npos) {
  std::string bytes = seed;
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !bytes.empty(); ++e) {
    const size_t end = std::min(region_end, bytes.size());
    const size_t begin = std::min(region_begin, end - 1);
    const size_t at = begin + rng() % (end - begin);
    switch (rng() % 6) {
      case 0:  // a flipped bit
        bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng() % 8)));
        break;
      case 1: {  // a run of random bytes
        const size_t n = std::min<size_t>(1 + rng() % 64, bytes.size() - at);
        for (size_t i = 0; i < n; ++i) bytes[at + i] = static_cast<char>(rng());
        break;
      }
      case 2:  // cut off here
        bytes.resize(at);
        break;
      case 3: {  // random bytes inserted
        std::string inserted(1 + rng() % 16, '\0');
        for (char& c : inserted) c = static_cast<char>(rng());
        bytes.insert(at, inserted);
        break;
      }
      case 4: {  // a piece of the file repeated
        const size_t n = std::min<size_t>(1 + rng() % 128, bytes.size() - at);
        bytes.insert(at, bytes.substr(at, n));
        break;
      }
      default: {  // an interesting value: 0, 0xff.., or a length-like number
        static const char kValues[] = {'\0', '\xff', '\x7f', '\x80', '"', '{', '\n', '9'};
        bytes[at] = kValues[rng() % sizeof(kValues)];
        break;
      }
    }
  }
  return bytes;
}

struct Figures {
  int64_t executions = 0, exceptions = 0, accepted = 0;
};

double Scale() {
  const char* env = std::getenv("DOCMATCH_FUZZ_EXECUTIONS");
  return env ? std::atof(env) : 1.0;
}

// Runs `read` on `executions` mutants of `seed_file` (rewritten in place;
// the original is restored after) and prints the figures.
Figures Fuzz(const std::string& target, const std::string& seed_file, int64_t executions,
             const std::function<void()>& read, size_t region_begin = 0, size_t region_end = std::string::npos) {
  const std::string seed = ReadBytes(seed_file);
  EXPECT_NO_THROW(read()) << target << ": the unmutated seed must read";
  std::mt19937_64 rng(std::hash<std::string>{}(target));
  Figures f;
  const auto total = static_cast<int64_t>(static_cast<double>(executions) * Scale());
  for (int64_t i = 0; i < total; ++i) {
    WriteBytes(seed_file, Mutate(seed, rng, region_begin, region_end));
    ++f.executions;
    try {
      read();
      ++f.accepted;
    } catch (const std::exception&) {
      ++f.exceptions;
    }
  }
  WriteBytes(seed_file, seed);
  std::cout << "{\"fuzz_target\": \"" << target << "\", \"executions\": " << f.executions
            << ", \"exceptions\": " << f.exceptions << ", \"accepted\": " << f.accepted << "}" << std::endl;
  return f;
}

TEST(Fuzz, JsonlDocumentReader) {
  data::testing::ScratchDir dir("fuzz");
  const std::string path = dir.File("in.jsonl");
  data::testing::WriteFile(path,
                           "{\"id\": \"a\", \"title\": \"A\", \"text\": \"One sentence. Two\\n\\nthree \\u00e9.\"}\n"
                           "{\"id\": \"b\", \"text\": \"caf\xc3\xa9 \\\"quoted\\\" text\"}\n"
                           "{\"id\": \"c\", \"text\": \"\"}\n");
  const Figures f = Fuzz("jsonl", path, 4000, [&] {
    data::RawDocumentReader reader(path);
    data::RawDocument d;
    while (reader.Next(&d)) {
    }
  });
  EXPECT_GT(f.exceptions, 0);  // the mutations do reach the error paths
  EXPECT_GT(f.accepted, 0);
}

TEST(Fuzz, PairAndRelevanceReaders) {
  data::testing::ScratchDir dir("fuzz");
  data::testing::WriteSyntheticCorpus(dir.File("corpus"), {4, 3});
  const data::Corpus corpus(dir.File("corpus"));
  const std::string pairs = dir.File("pairs.jsonl"), relevance = dir.File("relevance.jsonl");
  data::testing::WriteFile(pairs,
                           "{\"source\": \"doc-0\", \"target\": \"doc-1\", \"label\": 1}\n"
                           "{\"source\": \"doc-2\", \"target\": \"doc-6\", \"label\": 0}\n");
  data::testing::WriteFile(relevance,
                           "{\"query\": \"doc-0\", \"relevant\": [\"doc-1\", \"doc-5\"]}\n"
                           "{\"source\": \"doc-3\", \"target\": \"doc-4\"}\n");
  const Figures p = Fuzz("pairs", pairs, 3000, [&] { data::ReadPairs(pairs, corpus); });
  const Figures r = Fuzz("relevance", relevance, 3000, [&] { data::ReadRelevance(relevance, corpus); });
  EXPECT_GT(p.exceptions, 0);
  EXPECT_GT(r.exceptions, 0);
}

TEST(Fuzz, ManifestAndShardReader) {
  data::testing::ScratchDir dir("fuzz");
  data::testing::WriteSyntheticCorpus(dir.File("corpus"), {40, 30});
  const std::string folder = dir.File("corpus");
  const auto read_all = [&] {
    const data::Corpus corpus(folder);
    for (int64_t i = 0; i < corpus.num_documents(); ++i) corpus.Get(i);
    for (int s = 0; s < corpus.num_shards(); ++s) corpus.shard(s).ReadLengths();
  };
  Fuzz("manifest", folder + "/" + data::kManifestFile, 1500, read_all);
  // The shard: everywhere, and (more executions) in its second half, where
  // the chunks of tokens and offsets lie, as most of a large shard's bytes do.
  std::string shard;
  for (const auto& entry : fs::directory_iterator(folder)) {
    if (entry.path().extension() == ".h5")
      shard = std::min(shard.empty() ? entry.path().string() : shard, entry.path().string());
  }
  const size_t size = fs::file_size(shard);
  const Figures whole = Fuzz("shard", shard, 600, read_all);
  const Figures data = Fuzz("shard-data", shard, 600, read_all, size / 2, size);
  EXPECT_GT(whole.exceptions + data.exceptions, 0);
}

TEST(Fuzz, SafetensorsCheckpointAndChecksumReaders) {
  data::testing::ScratchDir dir("fuzz");
  torch::manual_seed(0);
  const std::string st = dir.File("model.safetensors");
  io::WriteSafetensors({{"a.weight", torch::randn({4, 3})}, {"b", torch::arange(5, torch::kInt64)}}, st,
                       {{"format", "pt"}});
  Fuzz("safetensors", st, 3000, [&] { io::ReadSafetensors(st); });

  torch::nn::Linear linear(3, 2);
  const std::string archive = dir.File("model.pt");
  io::SaveModule(*linear, archive);
  Fuzz("checkpoint-archive", archive, 1500, [&] { io::ReadModuleFile(archive); });

  fs::create_directories(dir.File("folder"));
  data::testing::WriteFile(dir.File("folder/config.json"), "{\"format\": \"docmatch-model\"}\n");
  data::testing::WriteFile(dir.File("folder/trainer.json"), "{\"step\": 3}\n");
  io::WriteChecksums(dir.File("folder"));
  Fuzz("checksums", dir.File("folder/checksums.json"), 2000, [&] { io::VerifyChecksums(dir.File("folder")); });
}

}  // namespace
}  // namespace docmatch
