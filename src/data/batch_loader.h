// BatchLoader: turns a rank's ShardStream into batches on a background
// thread, so building batches (packing blocks, drawing masks) overlaps the
// training step. A bounded queue keeps at most `prefetch` batches ready.
//
// Resuming: every batch carries the stream cursor just after its last
// document, and cursor() returns the cursor of the last batch handed out, so
// a checkpoint taken between steps resumes exactly, however far the loader
// had read ahead. The last, partial batch of an epoch is dropped by default
// (every rank then takes the same number of steps per epoch, up to one).
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/shard_stream.h"

namespace docmatch::data {

template <typename Batch>
class BatchLoader {
 public:
  struct Item {
    Batch batch;
    StreamCursor cursor;  // the stream just after this batch's documents
  };
  // Builds one batch from its documents; `epoch` keys the random draws.
  using Builder = std::function<Batch(const std::vector<const Document*>& documents, int64_t epoch)>;

  BatchLoader(std::shared_ptr<ShardStream> stream, int64_t batch_size, Builder builder, int prefetch = 4,
              bool drop_last = true)
      : stream_(std::move(stream)),
        batch_size_(batch_size),
        builder_(std::move(builder)),
        prefetch_(prefetch),
        drop_last_(drop_last),
        cursor_(stream_->cursor()) {
    worker_ = std::thread([this] { Run(); });
  }
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;
  ~BatchLoader() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    worker_.join();
  }

  // The next batch, or nullopt at the end of the stream's current epoch.
  // Rethrows, here, any error the worker met (a damaged shard, say).
  std::optional<Batch> Next() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !ready_.empty() || finished_ || error_; });
    if (ready_.empty() && error_) std::rethrow_exception(error_);
    if (ready_.empty()) return std::nullopt;
    Item item = std::move(ready_.front());
    ready_.pop_front();
    cursor_ = item.cursor;
    changed_.notify_all();
    return std::move(item.batch);
  }

  // Where a resumed run must restart the stream to continue after the last
  // batch handed out.
  StreamCursor cursor() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cursor_;
  }

 private:
  void Run() {
    try {
      const int64_t epoch = stream_->epoch();
      std::vector<Document> documents;
      for (;;) {
        std::optional<Document> d = stream_->Next();
        if (d) documents.push_back(std::move(*d));
        const bool full = static_cast<int64_t>(documents.size()) == batch_size_;
        const bool last = !d && !documents.empty() && !drop_last_;
        if (full || last) {
          std::vector<const Document*> pointers;
          for (const auto& doc : documents) pointers.push_back(&doc);
          Item item{builder_(pointers, epoch), stream_->cursor()};
          documents.clear();
          std::unique_lock<std::mutex> lock(mutex_);
          changed_.wait(lock, [&] { return stop_ || static_cast<int>(ready_.size()) < prefetch_; });
          if (stop_) return;
          ready_.push_back(std::move(item));
          changed_.notify_all();
        }
        if (!d) break;
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
    changed_.notify_all();
  }

  std::shared_ptr<ShardStream> stream_;
  int64_t batch_size_;
  Builder builder_;
  int prefetch_;
  bool drop_last_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Item> ready_;
  StreamCursor cursor_;
  bool stop_ = false, finished_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace docmatch::data
