// ShardStream's epoch plan, its reader thread and the cursor it resumes from
// (shard_stream.h).
#include "data/corpus/shard_stream.h"

#include <glog/logging.h>

#include <algorithm>
#include <stdexcept>

#include "console/error.h"
#include "data/corpus/random.h"

namespace docmatch::data {
namespace {

// Keys that keep the stream's random draws apart from every other use of the seed.
constexpr uint64_t kChunkOrderKey = 0x63686b6f72646572ULL;   // "chkorder"
constexpr uint64_t kWindowOrderKey = 0x77696e646f72646eULL;  // "windordn"

}  // namespace

nlohmann::json StreamCursor::ToJson() const {
  return {{"seed", seed}, {"epoch", epoch}, {"rank", rank}, {"world_size", world_size}, {"position", position}};
}

StreamCursor StreamCursor::FromJson(const nlohmann::json& json) {
  StreamCursor c;
  c.seed = json.at("seed").get<uint64_t>();
  c.epoch = json.at("epoch").get<int64_t>();
  c.rank = json.at("rank").get<int>();
  c.world_size = json.at("world_size").get<int>();
  c.position = json.at("position").get<int64_t>();
  return c;
}

std::pair<int64_t, int64_t> ShardStream::Share(int64_t total, int rank, int world_size) {
  // floor(total * r / W): sizes differ by at most one, parts tile [0, total).
  return {total * rank / world_size, total * (rank + 1) / world_size};
}

ShardStream::ShardStream(std::shared_ptr<const Corpus> corpus, StreamOptions options)
    : corpus_(std::move(corpus)), options_(options) {
  if (!corpus_) throw Error("data", "ShardStream: no corpus");
  if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size) {
    throw Error("data", "ShardStream: rank " + std::to_string(options_.rank) + " of world size " +
                            std::to_string(options_.world_size) + " is not a rank");
  }
  if (options_.chunk_documents < 1 || options_.window_chunks < 1 || options_.prefetch_windows < 1) {
    throw Error("data", "ShardStream: chunk_documents, window_chunks and prefetch_windows must be >= 1");
  }
  StartEpoch(0);
}

ShardStream::~ShardStream() { StopReader(); }

void ShardStream::PlanEpoch() {
  // 1. Chunks over all shards, shuffled by (seed, epoch).
  std::vector<Piece> chunks;
  for (int s = 0; s < corpus_->num_shards(); ++s) {
    const int64_t n = corpus_->shard(s).num_documents();
    for (int64_t b = 0; b < n; b += options_.chunk_documents) {
      chunks.push_back({s, b, std::min(n, b + options_.chunk_documents)});
    }
  }
  if (options_.shuffle) {
    KeyedRandom random(options_.seed, {kChunkOrderKey, static_cast<uint64_t>(epoch_)});
    random.Shuffle(&chunks);
  }
  // 2. This rank's contiguous part of the chunk sequence.
  std::tie(share_begin_, share_end_) = Share(corpus_->num_documents(), options_.rank, options_.world_size);
  std::vector<Piece> pieces;
  int64_t position = 0;
  for (const Piece& chunk : chunks) {
    const int64_t size = chunk.end - chunk.begin;
    const int64_t lo = std::max(position, share_begin_), hi = std::min(position + size, share_end_);
    if (lo < hi) pieces.push_back({chunk.shard, chunk.begin + (lo - position), chunk.begin + (hi - position)});
    position += size;
    if (position >= share_end_) break;
  }
  // 3. Windows of `window_chunks` pieces.
  windows_.clear();
  int64_t window_position = 0;
  for (size_t p = 0; p < pieces.size(); p += options_.window_chunks) {
    Window window{{}, window_position, 0};
    for (size_t q = p; q < std::min(pieces.size(), p + options_.window_chunks); ++q) {
      window.pieces.push_back(pieces[q]);
      window.size += pieces[q].end - pieces[q].begin;
    }
    window_position += window.size;
    windows_.push_back(std::move(window));
  }
  if (window_position != share_end_ - share_begin_) {
    throw std::logic_error("[data] ShardStream: the windows do not cover this rank's share");
  }
}

std::vector<Document> ShardStream::ReadWindow(size_t w) const {
  const Window& window = windows_[w];
  std::vector<Document> documents;
  documents.reserve(window.size);
  for (const Piece& piece : window.pieces) {
    std::vector<Document> read = corpus_->shard(piece.shard).Read(piece.begin, piece.end);
    for (Document& d : read) {
      d.index += corpus_->shard_begin(piece.shard);
      documents.push_back(std::move(d));
    }
  }
  if (options_.shuffle) {
    // Keyed by the window's global position in the epoch, not by the rank.
    KeyedRandom random(options_.seed, {kWindowOrderKey, static_cast<uint64_t>(epoch_),
                                       static_cast<uint64_t>(share_begin_ + window.position)});
    random.Shuffle(&documents);
  }
  return documents;
}

void ShardStream::ReaderLoop(size_t first_window) {
  try {
    for (size_t w = first_window; w < windows_.size(); ++w) {
      std::vector<Document> documents = ReadWindow(w);
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || ready_.size() < static_cast<size_t>(options_.prefetch_windows); });
      if (stop_) return;
      ready_.push_back(std::move(documents));
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
    changed_.notify_all();
  }
}

void ShardStream::StopReader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    changed_.notify_all();
  }
  if (reader_.joinable()) reader_.join();
  ready_.clear();
  stop_ = false;
  error_ = nullptr;
}

void ShardStream::StartEpoch(int64_t epoch, int64_t position) {
  StopReader();
  epoch_ = epoch;
  PlanEpoch();
  if (position < 0 || position > epoch_size()) {
    throw std::out_of_range("[data] stream position " + std::to_string(position) + " outside this rank's share of " +
                            std::to_string(epoch_size()) + " documents");
  }
  // The window holding `position`, then skip into it.
  size_t first = 0;
  while (first < windows_.size() && windows_[first].position + windows_[first].size <= position) ++first;
  position_ = first < windows_.size() ? windows_[first].position : position;
  current_.clear();
  current_next_ = 0;
  windows_taken_ = first;
  reader_ = std::thread(&ShardStream::ReaderLoop, this, first);
  while (position_ < position) Next();
}

std::optional<Document> ShardStream::Next() {
  if (current_next_ == current_.size()) {
    if (windows_taken_ == windows_.size()) return std::nullopt;
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !ready_.empty() || error_; });
    if (ready_.empty() && error_) std::rethrow_exception(error_);
    current_ = std::move(ready_.front());
    ready_.pop_front();
    changed_.notify_all();
    current_next_ = 0;
    ++windows_taken_;
  }
  ++position_;
  return std::move(current_[current_next_++]);
}

StreamCursor ShardStream::cursor() const {
  return {options_.seed, epoch_, options_.rank, options_.world_size, position_};
}

void ShardStream::Restore(const StreamCursor& cursor) {
  if (cursor.seed != options_.seed || cursor.rank != options_.rank || cursor.world_size != options_.world_size) {
    throw Error("data", "cursor for seed " + std::to_string(cursor.seed) + " rank " + std::to_string(cursor.rank) +
                            "/" + std::to_string(cursor.world_size) + " cannot resume a stream for seed " +
                            std::to_string(options_.seed) + " rank " + std::to_string(options_.rank) + "/" +
                            std::to_string(options_.world_size));
  }
  StartEpoch(cursor.epoch, cursor.position);
}

}  // namespace docmatch::data
