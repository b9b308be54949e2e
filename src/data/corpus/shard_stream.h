// ShardStream: one rank's share of a corpus, epoch by epoch, read in chunks on
// a background thread, with a cursor that resumes exactly.
//
// The epoch plan, all of it a function of (seed, epoch, rank, world size):
//  1. The corpus is cut into chunks of `chunk_documents` consecutive documents
//     of one shard (one hyperslab read each); the chunk list is shuffled by
//     (seed, epoch).
//  2. The concatenated chunk sequence is cut into `world_size` contiguous
//     parts whose sizes differ by at most one document; rank r takes part r.
//     Every document is in exactly one part, for any number of ranks, also
//     more ranks than shards or chunks (a chunk may be split between ranks).
//  3. A rank's part is read in windows of `window_chunks` chunk pieces; the
//     documents of a window are shuffled together, keyed by the window's
//     position in the epoch, and handed out in that order.
// Memory holds at most (prefetch_windows + 1) windows of documents, whatever
// the corpus size; the plan itself is one entry per chunk.
//
// The cursor is (seed, epoch, rank, world size, documents consumed): a stream
// restored from it yields exactly what the saved stream would have yielded.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/corpus/corpus.h"

namespace docmatch::data {

struct StreamOptions {
  uint64_t seed = 1234;          // same seed + epoch = same order
  int rank = 0;                  // this rank, 0 .. world_size-1
  int world_size = 1;            // number of ranks sharing the corpus
  int64_t chunk_documents = 64;  // documents per hyperslab read
  int64_t window_chunks = 16;    // chunk pieces shuffled together
  int prefetch_windows = 2;      // windows read ahead by the background thread
  bool shuffle = true;           // false: corpus order (evaluation, embedding)
};

struct StreamCursor {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int rank = 0;
  int world_size = 1;
  int64_t position = 0;  // documents of this rank's share already consumed

  nlohmann::json ToJson() const;
  static StreamCursor FromJson(const nlohmann::json& json);
  bool operator==(const StreamCursor& o) const {
    return seed == o.seed && epoch == o.epoch && rank == o.rank && world_size == o.world_size && position == o.position;
  }
};

class ShardStream {
 public:
  ShardStream(std::shared_ptr<const Corpus> corpus, StreamOptions options);
  ShardStream(const ShardStream&) = delete;
  ShardStream& operator=(const ShardStream&) = delete;
  ~ShardStream();

  // Starts (or restarts) reading epoch `epoch` from document `position` of
  // this rank's share.
  void StartEpoch(int64_t epoch, int64_t position = 0);
  // The next document, or nullopt once this rank's share of the epoch is done.
  // Rethrows, on the caller's thread, any error the reader thread met.
  std::optional<Document> Next();

  StreamCursor cursor() const;
  // Resumes at `cursor`; its seed, rank and world size must match the options
  // (resharding to another world size belongs to the trainer).
  void Restore(const StreamCursor& cursor);

  // Documents this rank yields per epoch.
  int64_t epoch_size() const { return share_end_ - share_begin_; }
  int64_t epoch() const { return epoch_; }
  const StreamOptions& options() const { return options_; }

  // [begin, end) of rank `rank`'s share of `total` documents.
  static std::pair<int64_t, int64_t> Share(int64_t total, int rank, int world_size);

 private:
  struct Piece {
    int shard;
    int64_t begin, end;  // local document range inside the shard
  };
  struct Window {
    std::vector<Piece> pieces;
    int64_t position;  // first position (in this rank's share) of the window
    int64_t size;
  };

  void PlanEpoch();
  std::vector<Document> ReadWindow(size_t w) const;
  void StopReader();
  void ReaderLoop(size_t first_window);

  std::shared_ptr<const Corpus> corpus_;
  StreamOptions options_;
  int64_t epoch_ = 0;
  int64_t share_begin_ = 0, share_end_ = 0;
  std::vector<Window> windows_;

  // Consumer side.
  int64_t position_ = 0;
  std::vector<Document> current_;
  size_t current_next_ = 0;
  size_t windows_taken_ = 0;

  // Reader thread and its bounded queue of windows.
  std::thread reader_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::vector<Document>> ready_;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace docmatch::data
