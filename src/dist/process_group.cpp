// The per-process runtime object made from the launch (process_group.h).
#include "dist/process_group.h"

#include <glog/logging.h>

#include "dist/mpi_communicator.h"
#include "dist/runtime.h"

namespace docmatch::dist {

ProcessGroup::ProcessGroup(MPI_Comm base, const torch::Device& device, std::unique_ptr<Communicator> data)
    : device_(ResolveDevice(device)), control_(std::make_unique<ControlPlane>(base)), data_(std::move(data)) {
  if (!data_) data_ = std::make_unique<MpiCommunicator>(base, device_);
  TORCH_CHECK(data_->device() == device_, "[dist] the data plane works on ", data_->device().str(),
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

std::unique_ptr<ProcessGroup> ProcessGroup::FromLaunch(const std::string& device, const std::string& backend,
                                                       std::chrono::milliseconds timeout) {
  Placement placement = DiscoverPlacement(device, /*share_gpus=*/backend != "nccl");
  UseDevice(placement.device);
  auto control = std::make_unique<ControlPlane>(MPI_COMM_WORLD);
  control->set_timeout(timeout);
  const std::string chosen = AgreeOnBackend(backend, NcclPossible(placement.device, placement.gpus_shared), *control);
  std::unique_ptr<Communicator> data = MakeCommunicator(chosen, placement.device, timeout);
  if (control->rank() == 0) {
    LOG(INFO) << "[dist] " << control->size() << " ranks, backend " << data->backend() << " on "
              << placement.device.str() << (placement.gpus_shared ? " (GPUs shared by this node's ranks)" : "")
              << ", host allocator " << HostAllocator();
  }
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(placement), std::move(control), std::move(data)));
}

void ProcessGroup::set_timeout(std::chrono::milliseconds timeout) {
  control_->set_timeout(timeout);
  data_->set_timeout(timeout);
}

}  // namespace docmatch::dist
