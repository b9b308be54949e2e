// Communicator: the collectives data-parallel training needs, behind one
// small interface (STYLE.md, after Marian), so models never see MPI or NCCL.
//
// Every collective has an async form that returns a Work handle; Wait() blocks
// until the result is in place and aborts the whole job, naming the operation,
// if it takes longer than the communicator's timeout (a peer that died or
// never joined must not hang the others), after asking every peer where it
// is so the report names the rank that stalls (peer_probe.h). The sync forms are Async + Wait.
// Backends: MPI (CPU tensors, CUDA tensors staged through host memory) and
// NCCL (CUDA tensors, on its own stream). Choose with AgreeOnBackend, make
// with MakeCommunicator; a ProcessGroup (process_group.h) holds the result
// beside the control plane.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace docmatch::dist {

class Work {
 public:
  virtual ~Work() = default;
  // Returns when the output is usable by what the caller runs next: on the
  // host for MPI (it blocks until the collective is complete), on the
  // caller's CUDA stream for NCCL (the stream waits; the host goes on).
  virtual void Wait() = 0;
  // Lets the library advance the collective without blocking. MPI moves
  // non-blocking collectives forward only inside MPI calls, so callers that
  // want overlap poke their pending work now and then (the synchronizer does
  // it from every gradient hook).
  virtual void Progress() {}
};
using WorkHandle = std::shared_ptr<Work>;

class ControlPlane;

// The data plane: floating-point tensors on the run's device (activations,
// vectors, gradients). Every collective checks its tensors before any
// backend sees them: a tensor on another device, or of an integer or bool
// type, is an error naming the operation, because what is not floating
// data is metadata and belongs on the control plane (control_plane.h).
// Backends implement the Do* forms.
class Communicator;

// What --backend takes: auto lets AgreeOnBackend choose; a communicator is
// always kMpi or kNccl.
enum class Backend { kAuto, kMpi, kNccl };
const char* Name(Backend backend);  // "auto", "mpi", "nccl"
// Throws docmatch::Error naming the values when `text` is none of them.
Backend ParseBackend(const std::string& text);

class Communicator {
 public:
  // A CUDA device without an index is the current one (ResolveDevice).
  explicit Communicator(const torch::Device& device);
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Backend backend() const = 0;  // kMpi or kNccl
  // The device every tensor of this communicator lives on.
  const torch::Device& device() const { return device_; }

  // In place: every rank ends with the sum over ranks. Any shape. At one
  // rank it, like the broadcast, is checked and not launched.
  WorkHandle AllReduceAsync(torch::Tensor tensor);
  // `output` (size * n, ...) receives every rank's `input` (n, ...) in rank order.
  WorkHandle AllGatherAsync(torch::Tensor input, torch::Tensor output);
  // Uneven rows: rank r contributes counts[r] rows (from the control plane);
  // `output` has sum(counts).
  WorkHandle AllGatherUnevenAsync(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts);
  // The sum over ranks of `input` (sum(counts), ...), of which rank r keeps
  // rows [counts[0] + ... + counts[r-1], +counts[r]) in `output` (counts[r], ...).
  // Moves (size-1)/size of the input per rank on a ring, half an all-reduce's.
  WorkHandle ReduceScatterUnevenAsync(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts);
  // In place: every rank ends with `root`'s tensor.
  WorkHandle BroadcastAsync(torch::Tensor tensor, int root);
  virtual WorkHandle BarrierAsync() = 0;

  // Sync forms.
  void AllReduce(torch::Tensor tensor) { AllReduceAsync(std::move(tensor))->Wait(); }
  void Broadcast(torch::Tensor tensor, int root) { BroadcastAsync(std::move(tensor), root)->Wait(); }
  void Barrier() { BarrierAsync()->Wait(); }
  // input (n, ...) -> (size * n, ...)
  torch::Tensor AllGather(const torch::Tensor& input);
  // input (sum counts, ...) -> this rank's rows of the sum over ranks.
  torch::Tensor ReduceScatterUneven(const torch::Tensor& input, const std::vector<int64_t>& counts);

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 protected:
  virtual WorkHandle DoAllReduce(torch::Tensor tensor) = 0;
  virtual WorkHandle DoAllGather(torch::Tensor input, torch::Tensor output) = 0;
  virtual WorkHandle DoAllGatherUneven(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) = 0;
  virtual WorkHandle DoReduceScatterUneven(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) = 0;
  virtual WorkHandle DoBroadcast(torch::Tensor tensor, int root) = 0;

  std::chrono::milliseconds timeout_{std::chrono::minutes(5)};

 private:
  // The data plane's rule, said once (see the class comment).
  void CheckPayload(const char* op, const torch::Tensor& tensor) const;
  // Both tensors of a gather or scatter, and their one dtype.
  void CheckPair(const char* op, const torch::Tensor& input, const torch::Tensor& output) const;

  torch::Device device_;
};

// Whether this rank could use NCCL: a CUDA device in a build with NCCL, not
// shared with another rank of its node (NCCL refuses two ranks on one GPU
// of one host: "Duplicate GPU detected") unless every rank has a host
// identity of its own (`distinct_hosts`, DistinctNcclHosts): NCCL then takes
// them for separate hosts and joins them over its network transport, the
// code path of a multi-node job, on one GPU.
bool NcclPossible(const torch::Device& device, bool gpus_shared, bool distinct_hosts = false);

// Ranks sharing a GPU as NCCL's separate hosts. NCCL decides that
// two ranks share a host by its host hash, which NCCL_HOSTID overrides. With
// DOCMATCH_NCCL_HOST_PER_RANK=1 (launch/*.sh --nccl-host-per-rank) each rank
// sets NCCL_HOSTID=docmatch-rank-<rank>, where it is not set already, and
// NCCL_SOCKET_IFNAME=lo where that is not set (the sockets then stay on this
// machine), before NCCL starts. Returns whether it set the id.
constexpr const char* kNcclHostPerRank = "DOCMATCH_NCCL_HOST_PER_RANK";
bool GiveEachRankItsOwnNcclHost(int rank);
// Whether every rank has an NCCL_HOSTID and no two the same; collective.
bool DistinctNcclHosts(ControlPlane& control);

// The backend every rank uses, decided collectively: kMpi or kNccl as
// asked, or for kAuto NCCL only when it is possible on every rank (one rank
// on MPI while the others wait for NCCL's id would hang the job). Logs the
// choice on rank 0.
Backend AgreeOnBackend(Backend requested, bool nccl_possible, ControlPlane& control);

// The data plane for a backend AgreeOnBackend chose (kMpi or kNccl) on
// `device`, its collectives bounded by `timeout`. Needs MPI initialised (see
// runtime.h).
std::unique_ptr<Communicator> MakeCommunicator(Backend backend, const torch::Device& device,
                                               std::chrono::milliseconds timeout = std::chrono::minutes(5));

}  // namespace docmatch::dist
