// Communication benchmark, run under mpirun (JSON lines from rank 0):
//  * all_reduce and all_gather bandwidth for 1 KB .. 256 MB messages;
//  * the all-gather's backward: all-reduce of the whole gathered gradient and
//    a slice (the old way) against one reduce-scatter, even and uneven rows;
//  * the share of backward time that gradient synchronisation adds, with
//    buckets overlapping backward and with one all-reduce after it.
//   mpirun -np 2 build/bench/comm_bench [--max-mb 256] [--model configs/models/smith-paper.yaml]
#include <glog/logging.h>
#include <mpi.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "../tests/data/test_corpus.h"
#include "data/batches/blocks.h"
#include "dist/gradient_synchronizer.h"
#include "dist/mpi_communicator.h"
#include "dist/process_group.h"
#include "dist/runtime.h"
#include "model/config.h"
#include "model/smith.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Mean seconds of `iterations` calls after one warm-up, synchronised so every
// rank measures the same collective.
template <typename F>
double Time(docmatch::dist::Communicator& comm, int iterations, F&& f) {
  f();
  comm.Barrier();
  const auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) f();
  double seconds = Seconds(start) / iterations;
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  docmatch::dist::MpiRuntime mpi(&argc, &argv);
  docmatch::dist::SetUpRankLogging(mpi.rank());
  CLI::App app{"MPI collective bandwidth and gradient-sync overlap (JSON lines)"};
  int64_t max_mb = 256;
  std::string model_path = "configs/models/smith-paper.yaml";
  int steps = 7;
  int64_t documents = 2;
  int64_t bucket_mb = 25;
  int64_t vocab = 16000;
  app.add_option("--max-mb", max_mb, "largest message, MB")->capture_default_str();
  app.add_option("--model", model_path, "SMITH config for the overlap measurement")->capture_default_str();
  app.add_option("--steps", steps, "timed rounds (one backward per mode each)")->capture_default_str();
  app.add_option("--documents", documents, "documents per rank in the overlap batch")->capture_default_str();
  app.add_option("--vocab", vocab, "vocabulary of the overlap model (the embedding's gradient is all-reduced too)")
      ->capture_default_str();
  app.add_option("--bucket-mb", bucket_mb, "bucket size of the overlapping synchronizer")->capture_default_str();
  std::vector<std::string> sections = {"collectives", "gather_backward", "overlap"};
  app.add_option("--sections", sections, "which measurements to run")
      ->check(CLI::IsMember({"collectives", "gather_backward", "overlap"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  auto wanted = [&](const std::string& name) {
    return std::find(sections.begin(), sections.end(), name) != sections.end();
  };
  return docmatch::dist::RunOnAllRanks([&] {
    docmatch::dist::ProcessGroup group;
    docmatch::dist::Communicator& comm = group.data();
    const int n = comm.size();
    for (int64_t bytes = 1024; wanted("collectives") && bytes <= (max_mb << 20); bytes *= 4) {
      const int64_t elements = bytes / 4;
      const int iterations = bytes <= (1 << 20) ? 50 : bytes <= (16 << 20) ? 10 : 3;
      torch::Tensor buffer = torch::ones({elements});
      const double reduce = Time(comm, iterations, [&] { comm.AllReduce(buffer); });
      torch::Tensor part = torch::ones({elements / n}), gathered = torch::empty({elements / n * n});
      const double gather = Time(comm, iterations, [&] { comm.AllGatherAsync(part, gathered)->Wait(); });
      if (comm.rank() == 0) {
        // Bus bandwidth as nccl-tests define it: what each link carries.
        std::cout << nlohmann::json{{"bench", "mpi_collectives"},
                                    {"ranks", n},
                                    {"bytes", bytes},
                                    {"all_reduce_us", reduce * 1e6},
                                    {"all_reduce_algbw_gbps", bytes / reduce / 1e9},
                                    {"all_reduce_busbw_gbps", bytes / reduce / 1e9 * 2.0 * (n - 1) / n},
                                    {"all_gather_us", gather * 1e6},
                                    {"all_gather_algbw_gbps", bytes / gather / 1e9},
                                    {"all_gather_busbw_gbps", bytes / gather / 1e9 * (n - 1) / n}}
                         .dump()
                  << std::endl;
      }
    }

    // The all-gather's backward, both ways, on gathered gradients of the sizes
    // global negatives produce: rows per rank x hidden size, fp32.
    for (int64_t hidden : {256, 768}) {
      if (!wanted("gather_backward")) break;
      for (int64_t rows : {32, 256, 2048, 16384}) {
        for (bool uneven : {false, true}) {
          std::vector<int64_t> counts(n);
          for (int r = 0; r < n; ++r) counts[r] = rows + (uneven ? r : 0);
          int64_t total = 0, offset = 0;
          for (int r = 0; r < n; ++r) {
            if (r < comm.rank()) offset += counts[r];
            total += counts[r];
          }
          const torch::Tensor gradient = torch::rand({total, hidden});
          const int64_t bytes = total * hidden * 4;
          const int iterations = bytes <= (1 << 20) ? 50 : bytes <= (16 << 20) ? 10 : 3;
          torch::Tensor kept;
          const double reduce = Time(comm, iterations, [&] {
            torch::Tensor sum = gradient.clone();
            comm.AllReduce(sum);
            kept = sum.slice(0, offset, offset + counts[comm.rank()]);
          });
          torch::Tensor scattered;
          const double scatter =
              Time(comm, iterations, [&] { scattered = comm.ReduceScatterUneven(gradient, counts); });
          const bool equal = n == 1 || torch::allclose(kept, scattered, 1e-5, 1e-6);
          if (comm.rank() == 0) {
            // Bytes each rank sends on a ring: 2(n-1)/n of the tensor for the
            // all-reduce, (n-1)/n for the reduce-scatter.
            std::cout << nlohmann::json{{"bench", "all_gather_backward"},
                                        {"ranks", n},
                                        {"hidden", hidden},
                                        {"rows_per_rank", rows},
                                        {"uneven", uneven},
                                        {"gathered_gradient_bytes", bytes},
                                        {"all_reduce_slice_ring_bytes_per_rank", 2 * bytes * (n - 1) / n},
                                        {"reduce_scatter_ring_bytes_per_rank", bytes * (n - 1) / n},
                                        {"all_reduce_slice_us", reduce * 1e6},
                                        {"reduce_scatter_us", scatter * 1e6},
                                        {"speedup", reduce / scatter},
                                        {"results_equal", equal}}
                             .dump()
                      << std::endl;
          }
        }
      }
    }

    if (!wanted("overlap")) return 0;
    // Overlap: the same backward three ways.
    docmatch::model::SmithConfig config = docmatch::model::LoadModelConfig(model_path).smith;
    config.vocab_size = vocab;  // synthetic documents' ids are below 1005
    config.dropout = 0.0;
    torch::manual_seed(0);
    docmatch::model::SmithPretraining model(docmatch::model::SmithEncoder(config), config);
    std::vector<docmatch::data::Document> docs;
    for (int64_t i = 0; i < documents; ++i) {
      // Long synthetic documents: many sentences, so the blocks fill up.
      docmatch::data::Document d = docmatch::data::testing::SyntheticDocument(comm.rank() * documents + i);
      for (int k = 1; k < 40; ++k) {
        docmatch::data::testing::AppendDocument(&d, docmatch::data::testing::SyntheticDocument(1000 + k * 7 + i));
      }
      docs.push_back(std::move(d));
    }
    std::vector<const docmatch::data::Document*> pointers;
    for (const auto& d : docs) pointers.push_back(&d);
    docmatch::data::MaskOptions masks;
    masks.vocab_size = config.vocab_size;
    const auto batch = docmatch::model::ToTensors(
        docmatch::data::BuildBlockBatch(pointers, config.Blocks(), &masks, 0), torch::kCPU);
    int64_t parameters = 0;
    for (const auto& p : model->parameters()) parameters += p.numel();

    // One backward, timed from its start to gradients ready for the optimizer.
    auto once = [&](docmatch::dist::GradientSynchronizer* sync) {
      model->zero_grad();
      const auto [loss, lm, block] = model->Loss(batch, true);
      comm.Barrier();
      const auto start = Clock::now();
      if (sync) sync->Prepare(true);
      loss.backward();
      if (sync) sync->Finalize();
      double seconds = Seconds(start);
      MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      return seconds;
    };
    // Both synchronizers stay attached; only the one Prepare()d acts. The
    // one-bucket one does a single all-reduce once backward is over.
    docmatch::dist::SynchronizerOptions bucketed;
    bucketed.bucket_bytes = bucket_mb << 20;
    docmatch::dist::GradientSynchronizer overlapped(model->parameters(), group, bucketed);
    docmatch::dist::SynchronizerOptions one_bucket;
    one_bucket.bucket_bytes = int64_t{1} << 40;
    docmatch::dist::GradientSynchronizer after(model->parameters(), group, one_bucket);
    once(&overlapped);  // warm-up, and each synchronizer's first-step rebuild
    once(&after);
    // Rounds interleave the three modes so drift hits them alike; medians.
    std::vector<double> alone_s, overlapped_s, after_s;
    for (int round = 0; round < steps; ++round) {
      alone_s.push_back(once(nullptr));
      overlapped_s.push_back(once(&overlapped));
      after_s.push_back(once(&after));
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double alone = median(alone_s), with_overlap = median(overlapped_s), without_overlap = median(after_s);
    const int launched_early = overlapped.buckets_launched_during_backward(), buckets = overlapped.num_buckets();
    if (comm.rank() == 0) {
      std::cout << nlohmann::json{{"bench", "gradient_sync_overlap"},
                                  {"ranks", n},
                                  {"model", model_path},
                                  {"parameters", parameters},
                                  {"gradient_mb", parameters * 4 / 1048576.0},
                                  {"documents_per_rank", documents},
                                  {"bucket_mb", bucket_mb},
                                  {"buckets", buckets},
                                  {"buckets_started_during_backward", launched_early},
                                  {"backward_s", alone},
                                  {"backward_plus_sync_overlapped_s", with_overlap},
                                  {"backward_plus_sync_after_s", without_overlap},
                                  {"sync_share_overlapped", (with_overlap - alone) / alone},
                                  {"sync_share_after", (without_overlap - alone) / alone}}
                       .dump()
                << std::endl;
    }
    return 0;
  });
}
