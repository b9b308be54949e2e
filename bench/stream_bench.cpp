// Input-pipeline throughput of one rank: documents/s and tokens/s over whole
// epochs of a prepared corpus, printed as one JSON object. Alone it times
// ShardStream; with --batch-size it times what a pre-training step receives:
// the stream through data::BatchLoader (its background thread and queue) into
// SMITH block batches with WP+SP masks, built as `pretrain` builds them
// (--docsplit: DocSplit's two views), counting real tokens.
//   stream_bench --corpus corpora/wikispeedia [--epochs 3] [--chunk 64] [--window 16]
//   stream_bench --corpus corpora/wikispeedia --batch-size 32 --block-length 32 --max-blocks 48 [--builders 2]
//   mpirun -np 2 stream_bench --corpus ...   # each rank its share, one line each
// --buckets: each batch's step bucket too (data/batches/step_buckets.h): the
// distinct shapes an epoch needs (a captured step each), the fillers' share
// of blocks, tokens and predicted words, and the host's time to count,
// bucket and pad a batch's grid.
#include <sys/resource.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <set>
#include <tuple>

#include "data/batches/batch_loader.h"
#include "data/batches/blocks.h"
#include "data/batches/docsplit.h"
#include "data/batches/step_buckets.h"
#include "data/corpus/shard_stream.h"

int main(int argc, char** argv) {
  CLI::App app{"ShardStream read throughput (JSON on stdout)"};
  std::string corpus_dir;
  int epochs = 3;
  int64_t batch_size = 0;
  int builders = 1;
  bool docsplit = false, buckets = false;
  docmatch::data::BlockOptions blocks{32, 48};
  docmatch::data::StreamOptions options;
  app.add_option("--corpus", corpus_dir, "prepared corpus folder")->required()->check(CLI::ExistingDirectory);
  app.add_option("--epochs", epochs, "epochs to read")->capture_default_str();
  app.add_option("--chunk", options.chunk_documents, "documents per hyperslab read")->capture_default_str();
  app.add_option("--window", options.window_chunks, "chunks shuffled together")->capture_default_str();
  app.add_option("--prefetch", options.prefetch_windows, "windows read ahead")->capture_default_str();
  app.add_option("--batch-size", batch_size, "documents per block batch; 0: the stream alone")->capture_default_str();
  app.add_option("--block-length", blocks.block_length, "T, tokens per sentence block")->capture_default_str();
  app.add_option("--max-blocks", blocks.max_blocks, "S, blocks per document")->capture_default_str();
  app.add_option("--builders", builders, "BatchLoader threads building batches")->capture_default_str();
  app.add_flag("--docsplit", docsplit, "build DocSplit's two-view batches instead of WP+SP's");
  app.add_flag("--buckets", buckets, "with --batch-size: each batch's step bucket (shapes, fillers, host time)");
  app.add_option("--rank", options.rank, "this rank's share (default: OMPI_COMM_WORLD_RANK under mpirun)");
  app.add_option("--world-size", options.world_size, "ranks sharing the corpus (default: OMPI_COMM_WORLD_SIZE)");
  // Under mpirun each process streams its own share, as a training rank does
  // (no MPI needed: the plan is a function of rank and world size alone).
  if (const char* r = std::getenv("OMPI_COMM_WORLD_RANK")) options.rank = std::atoi(r);
  if (const char* w = std::getenv("OMPI_COMM_WORLD_SIZE")) options.world_size = std::atoi(w);
  CLI11_PARSE(app, argc, argv);

  auto corpus = std::make_shared<const docmatch::data::Corpus>(corpus_dir);
  auto stream = std::make_shared<docmatch::data::ShardStream>(corpus, options);
  int64_t documents = 0, tokens = 0, batches = 0;
  uint64_t checksum = 0;  // keeps the reads from being optimised away, and is reported
  // As `pretrain --objective wp+sp` (or docsplit) draws them.
  const docmatch::data::MaskOptions masks =
      docmatch::data::PretrainingMasks(corpus->manifest().vocab_size, options.seed, /*sentence_blocks=*/!docsplit);
  const auto build = [&](const std::vector<const docmatch::data::Document*>& docs, int64_t epoch) {
    return docsplit ? docmatch::data::BuildDocSplitBatch(docs, blocks, &masks, masks.seed, epoch)
                    : docmatch::data::BuildBlockBatch(docs, blocks, &masks, epoch);
  };
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> shapes;  // (B, R, N, M)
  double real[3] = {0, 0, 0}, bucketed[3] = {0, 0, 0}, bucket_seconds = 0;  // R, N, M
  const auto bucket = [&](const docmatch::data::BlockBatch& batch) {
    const auto begin = std::chrono::steady_clock::now();
    const docmatch::data::StepCounts c = docmatch::data::CountStep(batch);
    const docmatch::data::StepShape s =
        docmatch::data::BucketFor(c, batch.B, batch.K, blocks, docmatch::data::StepBuckets());
    const docmatch::data::BlockBatch grid = docmatch::data::PadGrid(batch, s.S, s.T);
    bucket_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    checksum += static_cast<uint64_t>(grid.tokens.back());
    shapes.emplace(batch.B, s.R, s.N, s.M);
    const int64_t counted[3] = {c.R, c.N, c.M}, sized[3] = {s.R, s.N, s.M};
    for (int i = 0; i < 3; ++i) {
      real[i] += static_cast<double>(counted[i]);
      bucketed[i] += static_cast<double>(sized[i]);
    }
  };
  const auto start = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    stream->StartEpoch(epoch);
    if (batch_size > 0) {
      docmatch::data::BatchLoader<docmatch::data::BlockBatch> loader(stream, batch_size, build, /*prefetch=*/4,
                                                                     /*drop_last=*/true, builders);
      while (auto batch = loader.Next()) {
        ++batches;
        documents += docsplit ? batch->B / 2 : batch->B;
        tokens += batch->real_tokens;
        checksum += static_cast<uint64_t>(batch->tokens.front());
        if (buckets) bucket(*batch);
      }
      continue;
    }
    while (auto d = stream->Next()) {
      ++documents;
      tokens += d->num_tokens();
      if (!d->tokens.empty()) checksum += static_cast<uint64_t>(d->tokens.front());
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const std::string pipeline = batch_size == 0 ? "stream" : docsplit ? "stream+docsplit" : "stream+blocks";
  const nlohmann::json result = {{"bench", "input_pipeline"},
                                 {"pipeline", pipeline},
                                 {"batch_size", batch_size},
                                 {"builders", builders},
                                 {"block_length", blocks.block_length},
                                 {"max_blocks", blocks.max_blocks},
                                 {"batches", batches},
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
  nlohmann::json out = result;
  if (buckets && batches > 0) {
    out["buckets"] = {{"distinct_shapes", shapes.size()},
                      {"filler_share_blocks", 1.0 - real[0] / bucketed[0]},
                      {"filler_share_tokens", 1.0 - real[1] / bucketed[1]},
                      {"filler_share_predicted", 1.0 - real[2] / bucketed[2]},
                      {"host_ms_per_batch", 1e3 * bucket_seconds / static_cast<double>(batches)}};
  }
  std::cout << out.dump() << std::endl;
  return 0;
}
