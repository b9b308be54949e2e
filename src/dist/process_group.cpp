// The per-process runtime object made from the launch (process_group.h).
#include "dist/process_group.h"

#include <glog/logging.h>

#include <cstdlib>

#include "console/error.h"
#include "dist/mpi_communicator.h"
#include "dist/runtime.h"

namespace docmatch::dist {

ProcessGroup::ProcessGroup(MPI_Comm base, const torch::Device& device, std::unique_ptr<Communicator> data)
    : device_(ResolveDevice(device)), control_(std::make_unique<ControlPlane>(base)), data_(std::move(data)) {
  if (!data_) data_ = std::make_unique<MpiCommunicator>(base, device_);
  DOCMATCH_CHECK(data_->device() == device_, "dist", "the data plane works on ", data_->device().str(),
                 ", the process group on ", device_.str());
  placement_.rank = control_->rank();
  placement_.size = control_->size();
  placement_.device = device_;
}

ProcessGroup::ProcessGroup(Placement placement, std::unique_ptr<ControlPlane> control,
                           std::unique_ptr<Communicator> data)
    : placement_(std::move(placement)),
      device_(placement_.device),
      control_(std::move(control)),
      data_(std::move(data)) {}

std::unique_ptr<ProcessGroup> ProcessGroup::FromLaunch(const std::string& device, Backend backend,
                                                       std::chrono::milliseconds timeout) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  GiveEachRankItsOwnNcclHost(world_rank);  // before NCCL reads its environment
  const char* host_id = std::getenv("NCCL_HOSTID");
  const bool host_ids = host_id != nullptr && *host_id != '\0';
  // Ranks with host identities may share GPUs and still ask for NCCL.
  Placement placement = DiscoverPlacement(device, /*share_gpus=*/backend != Backend::kNccl || host_ids);
  UseDevice(placement.device);
  auto control = std::make_unique<ControlPlane>(MPI_COMM_WORLD);
  control->set_timeout(timeout);
  const bool distinct_hosts = DistinctNcclHosts(*control);
  const Backend chosen =
      AgreeOnBackend(backend, NcclPossible(placement.device, placement.gpus_shared, distinct_hosts), *control);
  std::unique_ptr<Communicator> data = MakeCommunicator(chosen, placement.device, timeout);
  if (control->rank() == 0) {
    LOG(INFO) << "[dist] " << control->size() << " ranks, backend " << Name(data->backend()) << " on "
              << placement.device.str() << (placement.gpus_shared ? " (GPUs shared by this node's ranks)" : "")
              << ", host allocator " << HostAllocator();
    if (chosen == Backend::kNccl && placement.gpus_shared) {
      LOG(INFO) << "[dist] NCCL across ranks that share a GPU: each rank has its own NCCL_HOSTID, so NCCL takes "
                   "them for separate hosts and joins them over its network transport (sockets on "
                << (std::getenv("NCCL_SOCKET_IFNAME") ? std::getenv("NCCL_SOCKET_IFNAME") : "its default interface")
                << "), as across nodes";
    }
  }
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(placement), std::move(control), std::move(data)));
}

void ProcessGroup::set_timeout(std::chrono::milliseconds timeout) {
  control_->set_timeout(timeout);
  data_->set_timeout(timeout);
}

}  // namespace docmatch::dist
