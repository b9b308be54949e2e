// ProcessGroup: the one per-process object of a distributed run, made once
// from the launch and handed down to the trainer, the objectives, eval and
// embed (after c10d's process group): where this rank runs (placement and
// device, set current), the data plane (device tensors, communicator.h) and
// the control plane (host values, control_plane.h). Device and
// communicators do not travel as loose parameters, and which plane a value
// takes is decided by its type: tensors of the run's device, or C++ values.
#pragma once

#include <mpi.h>
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>

#include "dist/communicator.h"
#include "dist/control_plane.h"
#include "dist/runtime.h"

namespace docmatch::dist {

class ProcessGroup {
 public:
  // From the launch (collective over MPI_COMM_WORLD): placement (`device`:
  // cpu, cuda or auto), the CUDA device made current, the backend agreed by
  // every rank (`backend`: kAuto, kMpi or kNccl; logged on rank 0), both planes
  // with `timeout`.
  static std::unique_ptr<ProcessGroup> FromLaunch(const std::string& device, Backend backend,
                                                  std::chrono::milliseconds timeout);

  // Over `base` (MPI_COMM_SELF: one rank) on `device`, with `data` as the
  // data plane (default: MPI over `base`). For tests, benchmarks and
  // single-process work.
  explicit ProcessGroup(MPI_Comm base = MPI_COMM_WORLD, const torch::Device& device = torch::kCPU,
                        std::unique_ptr<Communicator> data = nullptr);

  int rank() const { return control_->rank(); }
  int size() const { return control_->size(); }
  const torch::Device& device() const { return device_; }
  const Placement& placement() const { return placement_; }
  // Floating-point tensors on device(): vectors, activations, gradients.
  Communicator& data() { return *data_; }
  // Host values: counts, orders, flags, sums, generator states, results.
  ControlPlane& control() { return *control_; }
  // Both planes' collective timeout.
  void set_timeout(std::chrono::milliseconds timeout);

 private:
  ProcessGroup(Placement placement, std::unique_ptr<ControlPlane> control, std::unique_ptr<Communicator> data);

  Placement placement_;
  torch::Device device_;
  std::unique_ptr<ControlPlane> control_;
  std::unique_ptr<Communicator> data_;
};

}  // namespace docmatch::dist
