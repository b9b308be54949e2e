// Naming the rank that stalls a collective. Each communicator numbers the
// collectives it starts (every rank starts them in the same order). While a
// rank waits on one, it answers "where are you?" on a private control
// communicator. A rank whose wait times out asks every peer and reports who
// waits in which collective and who did not answer within a grace period:
// that rank is stopped, hung, or busy outside any collective.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace docmatch::dist {

// A private duplicate of an MPI communicator (collective over `base`), for
// one object's messages alone: the probe's questions, a communicator's
// collectives, the control plane's values. Freed with the object, unless MPI
// is finalised by then.
class PrivateComm {
 public:
  explicit PrivateComm(MPI_Comm base);
  ~PrivateComm();
  PrivateComm(const PrivateComm&) = delete;
  PrivateComm& operator=(const PrivateComm&) = delete;
  MPI_Comm get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

struct Pending;

class PeerProbe : public std::enable_shared_from_this<PeerProbe> {
 public:
  // A private duplicate of `base` (collective: every rank of `base` calls it).
  explicit PeerProbe(MPI_Comm base);
  ~PeerProbe();
  PeerProbe(const PeerProbe&) = delete;
  PeerProbe& operator=(const PeerProbe&) = delete;

  // A collective as it starts: numbered 1, 2, ... with what its wait needs.
  Pending Start(std::string what, std::chrono::milliseconds timeout);
  int rank() const { return rank_; }
  // "rank 1 (host n2)": the node of each rank, gathered when the probe is made.
  std::string Name(int rank) const;
  // Answers the questions that have arrived: this rank waits in collective
  // `number`, described by `what`.
  void Answer(int64_t number, const std::string& what);
  // Asks every peer where it is and waits up to `grace` for the answers,
  // answering their questions meanwhile. One sentence per peer.
  std::string Survey(int64_t number, const std::string& what, std::chrono::milliseconds grace);

 private:
  PrivateComm comm_;
  int rank_ = 0, size_ = 1;
  std::atomic<int64_t> started_{0};
  int64_t question_ = 0;  // the buffer of the questions in flight
  std::vector<std::string> hosts_;
};

// One collective a rank waits on.
struct Pending {
  std::string what;  // "all_reduce of 4096 bytes (Float)"
  int64_t number = 0;
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<PeerProbe> probe;
};

// How a wait polls. By default, for a rank that waits on a collective of its
// own: hot for the first few milliseconds (a collective usually completes
// soon after its last peer arrives), then sleeping, the sleep doubling up to
// a millisecond, so a rank that waits minutes on a stalled peer uses a few
// percent of a core instead of all of it. Patient(): never hot, sleeps
// doubling up to 10 ms, for a thread that only follows completion (NCCL's
// watchdog: nothing waits on it, and spinning would take a core, and the CUDA
// driver's lock, from the thread that launches the step's kernels).
class PollBackoff {
 public:
  PollBackoff() = default;
  static PollBackoff Patient() { return PollBackoff(std::chrono::microseconds(0), std::chrono::microseconds(10000)); }
  void Pause();
  // Still in the first, hot milliseconds.
  bool hot() const;

 private:
  PollBackoff(std::chrono::microseconds hot_for, std::chrono::microseconds longest)
      : hot_for_(hot_for), longest_(longest) {}

  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::microseconds hot_for_{5000}, longest_{1000}, sleep_{10};
};

// Polls `done` as `backoff` says until it returns true, answering peers'
// questions once past the first 5 ms. Past the timeout: surveys the
// peers, logs which rank stalls and where everyone waits, and aborts the job
// with exit code 3 (MPI_Abort alone: a backend's own abort can block on the
// dead or hung peer that brought the job here).
void WaitOrAbort(const Pending& pending, const std::function<bool()>& done, PollBackoff backoff = PollBackoff());

}  // namespace docmatch::dist
