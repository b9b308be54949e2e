// Building, checking and querying the HNSW index of an embeddings file (ann_index.h).
#include "eval/ann_index.h"

#include <hnswlib/hnswlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "console/error.h"
#include "console/interrupt.h"
#include "console/progress.h"
#include "data/text/tokenizer.h"
#include "files/file_writer.h"
#include "io/checksums.h"

namespace docmatch::eval {
namespace fs = std::filesystem;
namespace {

std::string IdsHash(const EmbeddingFile& file) {
  std::string all;
  for (const std::string& id : file.ids()) all += id + "\n";
  return data::Fnv1a64Hex(all);
}

// When the embeddings file was last written, in nanoseconds of its clock.
int64_t ModifiedNs(const std::string& path) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(fs::last_write_time(path).time_since_epoch()).count();
}

torch::Tensor Unit(const torch::Tensor& rows) {
  return torch::nn::functional::normalize(rows.to(torch::kFloat), torch::nn::functional::NormalizeFuncOptions().dim(1))
      .contiguous();
}

// Runs body(i) for i in [0, n) on `threads` threads (0: every core), items
// handed out one at a time (HNSW insertions vary in cost); the first
// exception stops the rest and is rethrown. at::parallel_for ran on one
// thread here (ATen's OpenMP loop is compiled into the caller, which is not
// built with -fopenmp), so the threads are our own.
void Parallel(int64_t n, int threads, const std::function<void(int64_t)>& body) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<int64_t>(threads, n));
  std::atomic<int64_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      try {
        for (int64_t i = next++; i < n; i = next++) body(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(failure_mutex);
        failure = std::current_exception();
        next = n;
      }
    });
  }
  for (auto& thread : pool) thread.join();
  if (failure) std::rethrow_exception(failure);
}

// The bytes hnswlib's saveIndex writes for `graph`: its header fields, the
// level-0 block, then each element's upper-level links behind their size.
// A file of another size was cut short (a full disk: saveIndex does not check
// its stream).
int64_t SavedBytes(const hnswlib::HierarchicalNSW<float>& g) {
  size_t bytes = sizeof(g.offsetLevel0_) + sizeof(g.max_elements_) + sizeof(g.cur_element_count) +
                 sizeof(g.size_data_per_element_) + sizeof(g.label_offset_) + sizeof(g.offsetData_) +
                 sizeof(g.maxlevel_) + sizeof(g.enterpoint_node_) + sizeof(g.maxM_) + sizeof(g.maxM0_) + sizeof(g.M_) +
                 sizeof(g.mult_) + sizeof(g.ef_construction_);
  bytes += g.cur_element_count * g.size_data_per_element_;
  for (size_t i = 0; i < g.cur_element_count; ++i) {
    bytes += sizeof(unsigned int) + (g.element_levels_[i] > 0 ? g.size_links_per_element_ * g.element_levels_[i] : 0);
  }
  return static_cast<int64_t>(bytes);
}

}  // namespace

void AnnIndex::Build(const EmbeddingFile& file, const std::string& path, const AnnBuildOptions& options) {
  const int64_t N = file.size(), D = file.dimension();
  if (N == 0) throw Error("index", file.path() + " holds no vectors");
  hnswlib::InnerProductSpace space(static_cast<size_t>(D));
  hnswlib::HierarchicalNSW<float> graph(&space, static_cast<size_t>(N), static_cast<size_t>(options.m),
                                        static_cast<size_t>(options.ef_construction), options.seed);
  console::ProgressBar bar("[index] inserting", N, "vectors", "", options.progress);
  constexpr int64_t kBlock = 8192;  // rows read from the file at a time
  for (int64_t begin = 0; begin < N; begin += kBlock) {
    const int64_t end = std::min(N, begin + kBlock);
    const torch::Tensor block = Unit(file.Vectors(begin, end));
    const float* data = block.data_ptr<float>();
    // The first point alone: hnswlib's entry point must exist before threads
    // insert (addPoint is thread-safe).
    const int64_t first = begin == 0 ? 1 : 0;
    if (first) graph.addPoint(data, 0);
    Parallel(end - begin - first, options.threads, [&](int64_t i) {
      if (console::InterruptRequested()) return;  // the rest of the block is skipped; thrown below
      const int64_t row = begin + first + i;
      graph.addPoint(data + (row - begin) * D, static_cast<size_t>(row));
    });
    console::StopIfInterrupted();  // before the index file is written
    bar.Add(end - begin);
  }
  bar.Finish();
  const std::string tmp = path + ".tmp";
  graph.saveIndex(tmp);
  const int64_t expected = SavedBytes(graph);
  const int64_t written = fs::exists(tmp) ? static_cast<int64_t>(fs::file_size(tmp)) : 0;
  if (written != expected) {
    fs::remove(tmp);
    throw Error("index", "writing " + path + " stopped after " + std::to_string(written) + " of " +
                             std::to_string(expected) + " bytes (is the disk full?); nothing was replaced");
  }
  const nlohmann::json meta = {{"format", "docmatch-hnsw"},
                               {"version", 1},
                               {"embeddings", file.path()},
                               {"embeddings_bytes", static_cast<int64_t>(fs::file_size(file.path()))},
                               {"embeddings_modified_ns", ModifiedNs(file.path())},
                               {"embeddings_crc32", io::Crc32Of(file.path())},
                               {"ids_hash", IdsHash(file)},
                               {"rows", N},
                               {"dimension", D},
                               {"m", options.m},
                               {"ef_construction", options.ef_construction},
                               {"index_bytes", expected}};
  fs::rename(tmp, path);
  files::ReplaceFile(path + ".json", meta.dump(2) + "\n");
}

AnnIndex::AnnIndex(const std::string& path, const EmbeddingFile& file) {
  const std::string meta_path = path + ".json";
  std::ifstream in(meta_path);
  if (!in || !fs::exists(path)) {
    throw Error("search", "no index " + path + " (with " + meta_path +
                              "): build it with `docmatch index "
                              "--embeddings " +
                              file.path() + "`");
  }
  nlohmann::json meta;
  try {
    in >> meta;
  } catch (const nlohmann::json::exception& e) {
    throw Error("search", meta_path + " is unreadable: " + e.what());
  }
  const auto stale = [&](const std::string& why) {
    throw Error("search",
                "index " + path + " " + why + ": rebuild it with `docmatch index --embeddings " + file.path() + "`");
  };
  if (meta.value("format", "") != "docmatch-hnsw") stale("is not a docmatch HNSW index");
  if (meta.value("index_bytes", int64_t{-1}) != static_cast<int64_t>(fs::file_size(path))) {
    stale("is " + std::to_string(fs::file_size(path)) + " bytes, not the " +
          std::to_string(meta.value("index_bytes", int64_t{-1})) + " written (truncated or replaced)");
  }
  // The whole file's CRC-32 decides; it is read again only when the file's
  // size or modification time moved since the build (a rewrite with the same
  // vectors then still passes).
  const bool untouched =
      meta.value("embeddings_bytes", int64_t{-1}) == static_cast<int64_t>(fs::file_size(file.path())) &&
      meta.value("embeddings_modified_ns", int64_t{-1}) == ModifiedNs(file.path());
  if (meta.value("rows", int64_t{-1}) != file.size() || meta.value("dimension", int64_t{-1}) != file.dimension() ||
      meta.value("ids_hash", "") != IdsHash(file) || !meta.contains("embeddings_crc32") ||
      (!untouched && meta["embeddings_crc32"].get<std::string>() != io::Crc32Of(file.path()))) {
    stale("was built from other vectors than " + file.path() + " holds now");
  }
  space_ = std::make_unique<hnswlib::InnerProductSpace>(static_cast<size_t>(file.dimension()));
  graph_ =
      std::make_unique<hnswlib::HierarchicalNSW<float>>(space_.get(), path, false, static_cast<size_t>(file.size()));
}

AnnIndex::~AnnIndex() = default;

std::vector<std::vector<std::pair<int64_t, double>>> AnnIndex::Search(const torch::Tensor& queries, int64_t k,
                                                                      int64_t ef,
                                                                      const std::vector<int64_t>& skip) const {
  const torch::Tensor unit = Unit(queries);
  const int64_t Q = unit.size(0), D = unit.size(1);
  std::vector<std::vector<std::pair<int64_t, double>>> out(Q);
  graph_->setEf(static_cast<size_t>(std::max(ef, k + 1)));
  const float* data = unit.data_ptr<float>();
  Parallel(Q, 0, [&](int64_t q) {
    auto found = graph_->searchKnn(data + q * D, static_cast<size_t>(k + 1));  // farthest first
    std::vector<std::pair<int64_t, double>>& hits = out[q];
    while (!found.empty()) {
      const auto [distance, row] = found.top();
      found.pop();
      if (static_cast<int64_t>(row) != skip[q]) hits.emplace_back(static_cast<int64_t>(row), 1.0 - distance);
    }
    std::sort(hits.begin(), hits.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    if (static_cast<int64_t>(hits.size()) > k) hits.resize(k);
  });
  return out;
}

}  // namespace docmatch::eval
