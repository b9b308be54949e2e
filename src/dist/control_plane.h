// ControlPlane: the host side of the distributed runtime. Counts, orders,
// flags, metric sums, generator states and results travel here as plain C++
// values over MPI; tensors travel on the data plane (communicator.h), which
// accepts only floating-point tensors on the run's device. Kept apart, no
// metadata tensor can reach a device collective (the first NCCL step would
// otherwise crash on a host tensor), and reading a count costs no device
// synchronisation (after c10d: metadata through a host store, tensors
// through the device backend).
//
// Every call is collective over the ranks of `base`, blocking, and times out
// like the data plane's Wait(): past the timeout the job ends naming the
// stalled rank (peer_probe.h).
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "dist/peer_probe.h"

namespace docmatch::dist {

class ControlPlane {
 public:
  // A private duplicate of `base` (collective; MPI_COMM_SELF gives one rank).
  explicit ControlPlane(MPI_Comm base = MPI_COMM_WORLD);
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  // Every rank's `value`, in rank order (row counts before a gather).
  std::vector<int64_t> AllGather(int64_t value);
  // Every rank's `values` concatenated in rank order; ranks may hold
  // different numbers of them (`counts`, when given, receives each rank's).
  // For int64_t, double and uint8_t.
  template <typename T>
  std::vector<T> AllGatherUneven(const std::vector<T>& values, std::vector<int64_t>* counts = nullptr);
  // In place: the element-wise sum over ranks (same length on every rank).
  void Sum(std::vector<double>& values);
  void Sum(std::vector<int64_t>& values);
  // Whether `flag` is true on any rank.
  bool Any(bool flag);
  // In place: every rank ends with `root`'s values (same length everywhere).
  void Broadcast(std::vector<int64_t>& values, int root);
  void Barrier();

 private:
  // Waits for `request` like a data-plane Wait(): polling, with the timeout
  // that names the stalled rank.
  void Wait(MPI_Request* request, const char* what);

  PrivateComm comm_;
  std::chrono::milliseconds timeout_{std::chrono::minutes(5)};
  std::shared_ptr<PeerProbe> probe_;
};

}  // namespace docmatch::dist
