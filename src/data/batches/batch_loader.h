// BatchLoader: turns a rank's ShardStream into batches on background
// threads, so building batches (packing blocks, drawing masks) overlaps the
// training step. One reader thread takes documents from the stream and cuts
// them into batches; `builders` threads build those batches in parallel, and
// Next() hands them out in stream order, so the batches are the same for any
// number of builders. At most `prefetch` batches are read ahead (queued,
// being built, or ready).
//
// Resuming: every batch carries the stream cursor just after its last
// document, and cursor() returns the cursor of the last batch handed out, so
// a checkpoint taken between steps resumes exactly, however far the loader
// had read ahead. The last, partial batch of an epoch is dropped by default
// (every rank then takes the same number of steps per epoch, up to one).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "console/error.h"
#include "data/corpus/shard_stream.h"

namespace docmatch::data {

template <typename Batch>
class BatchLoader {
 public:
  struct Item {
    Batch batch;
    StreamCursor cursor;  // the stream just after this batch's documents
  };
  // Builds one batch from its documents; `epoch` keys the random draws. With
  // several builders it runs on several threads at once, so it must not
  // change shared state (the trainer's builders are pure functions).
  using Builder = std::function<Batch(const std::vector<const Document*>& documents, int64_t epoch)>;

  BatchLoader(std::shared_ptr<ShardStream> stream, int64_t batch_size, Builder builder, int prefetch = 4,
              bool drop_last = true, int builders = 1)
      : stream_(std::move(stream)),
        batch_size_(batch_size),
        builder_(std::move(builder)),
        prefetch_(std::max(1, prefetch)),
        drop_last_(drop_last),
        epoch_(stream_->epoch()),
        cursor_(stream_->cursor()) {
    try {
      reader_ = std::thread([this] { Read(); });
      for (int i = 0; i < std::max(1, builders); ++i) builders_.emplace_back([this] { Build(); });
    } catch (const std::system_error& e) {
      // No memory or thread left for one more (ulimit -v, -u): the threads
      // already started are stopped and joined, not left to abort the process.
      Stop();
      throw Error("data", std::string("cannot start the batch loader's threads (") + e.what() +
                              "): the process is out of memory or threads; a smaller --batch-size, or more memory");
    }
  }
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;
  ~BatchLoader() { Stop(); }

  // The next batch, or nullopt at the end of the stream's current epoch.
  // Rethrows, here, any error a background thread met (a damaged shard, say).
  std::optional<Batch> Next() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return built_.count(next_out_) || (read_all_ && next_out_ == next_job_) || error_; });
    auto found = built_.find(next_out_);
    if (found == built_.end()) {
      if (error_) std::rethrow_exception(error_);
      return std::nullopt;
    }
    Item item = std::move(found->second);
    built_.erase(found);
    ++next_out_;
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
  struct Job {
    int64_t number = 0;  // position in stream order
    std::vector<Document> documents;
    StreamCursor cursor;  // the stream just after these documents
  };

  // Asks every started thread to stop and joins it.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    if (reader_.joinable()) reader_.join();
    for (auto& builder : builders_) {
      if (builder.joinable()) builder.join();
    }
  }

  void Fail() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::current_exception();
    changed_.notify_all();
  }

  void Read() {
    try {
      std::vector<Document> documents;
      for (;;) {
        std::optional<Document> d = stream_->Next();
        if (d) documents.push_back(std::move(*d));
        const bool full = static_cast<int64_t>(documents.size()) == batch_size_;
        const bool last = !d && !documents.empty() && !drop_last_;
        if (full || last) {
          Job job{0, std::move(documents), stream_->cursor()};
          documents.clear();
          std::unique_lock<std::mutex> lock(mutex_);
          changed_.wait(lock, [&] { return stop_ || error_ || next_job_ - next_out_ < prefetch_; });
          if (stop_ || error_) return;
          job.number = next_job_++;
          jobs_.push_back(std::move(job));
          changed_.notify_all();
        }
        if (!d) break;
      }
    } catch (...) {
      Fail();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    read_all_ = true;
    changed_.notify_all();
  }

  void Build() {
    try {
      for (;;) {
        Job job;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          changed_.wait(lock, [&] { return stop_ || error_ || !jobs_.empty() || read_all_; });
          if (stop_ || error_ || jobs_.empty()) return;
          job = std::move(jobs_.front());
          jobs_.pop_front();
        }
        std::vector<const Document*> pointers;
        for (const auto& doc : job.documents) pointers.push_back(&doc);
        Item item{builder_(pointers, epoch_), job.cursor};
        std::lock_guard<std::mutex> lock(mutex_);
        built_.emplace(job.number, std::move(item));
        changed_.notify_all();
      }
    } catch (...) {
      Fail();
    }
  }

  std::shared_ptr<ShardStream> stream_;
  int64_t batch_size_;
  Builder builder_;
  int prefetch_;
  bool drop_last_;
  int64_t epoch_;  // the stream's, fixed for the loader's life
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> jobs_;                 // read, waiting for a builder
  std::map<int64_t, Item> built_;        // built, by position in stream order
  int64_t next_job_ = 0, next_out_ = 0;  // batches read so far; batches handed out so far
  StreamCursor cursor_;
  bool stop_ = false, read_all_ = false;
  std::exception_ptr error_;
  std::thread reader_;
  std::vector<std::thread> builders_;
};

}  // namespace docmatch::data
