// ShardStream read throughput of one rank: documents/s and tokens/s over whole
// epochs of a prepared corpus, printed as one JSON object.
//   stream_bench --corpus corpora/wikispeedia [--epochs 3] [--chunk 64] [--window 16]
//   mpirun -np 2 stream_bench --corpus ...   # each rank its share, one line each
#include <sys/resource.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "data/shard_stream.h"

int main(int argc, char** argv) {
  CLI::App app{"ShardStream read throughput (JSON on stdout)"};
  std::string corpus_dir;
  int epochs = 3;
  docmatch::data::StreamOptions options;
  app.add_option("--corpus", corpus_dir, "prepared corpus folder")->required()->check(CLI::ExistingDirectory);
  app.add_option("--epochs", epochs, "epochs to read")->capture_default_str();
  app.add_option("--chunk", options.chunk_documents, "documents per hyperslab read")->capture_default_str();
  app.add_option("--window", options.window_chunks, "chunks shuffled together")->capture_default_str();
  app.add_option("--prefetch", options.prefetch_windows, "windows read ahead")->capture_default_str();
  app.add_option("--rank", options.rank, "this rank's share (default: OMPI_COMM_WORLD_RANK under mpirun)");
  app.add_option("--world-size", options.world_size, "ranks sharing the corpus (default: OMPI_COMM_WORLD_SIZE)");
  // Under mpirun each process streams its own share, as a training rank does
  // (no MPI needed: the plan is a function of rank and world size alone).
  if (const char* r = std::getenv("OMPI_COMM_WORLD_RANK")) options.rank = std::atoi(r);
  if (const char* w = std::getenv("OMPI_COMM_WORLD_SIZE")) options.world_size = std::atoi(w);
  CLI11_PARSE(app, argc, argv);

  auto corpus = std::make_shared<const docmatch::data::Corpus>(corpus_dir);
  docmatch::data::ShardStream stream(corpus, options);
  int64_t documents = 0, tokens = 0;
  uint64_t checksum = 0;  // keeps the reads from being optimised away, and is reported
  const auto start = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    stream.StartEpoch(epoch);
    while (auto d = stream.Next()) {
      ++documents;
      tokens += d->num_tokens();
      if (!d->tokens.empty()) checksum += static_cast<uint64_t>(d->tokens.front());
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const nlohmann::json result = {{"bench", "shard_stream"},
                                 {"corpus", corpus_dir},
                                 {"epochs", epochs},
                                 {"rank", options.rank},
                                 {"world_size", options.world_size},
                                 {"chunk_documents", options.chunk_documents},
                                 {"window_chunks", options.window_chunks},
                                 {"documents", documents},
                                 {"tokens", tokens},
                                 {"seconds", seconds},
                                 {"documents_per_second", documents / seconds},
                                 {"tokens_per_second", tokens / seconds},
                                 {"peak_rss_mib", usage.ru_maxrss / 1024.0},
                                 {"checksum", checksum}};
  std::cout << result.dump() << std::endl;
  return 0;
}
