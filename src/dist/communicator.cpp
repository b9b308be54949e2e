// What both backends share: the synchronous forms, the timeout wait that names
// the stalled operation, and MakeCommunicator's choice (communicator.h).
#include "dist/communicator.h"

#include <glog/logging.h>

#include <cstdlib>
#include <set>
#include <string>

#include "console/error.h"
#include "dist/control_plane.h"
#include "dist/mpi_communicator.h"
#include "dist/runtime.h"
#ifdef DOCMATCH_HAS_NCCL
#include "dist/nccl_communicator.h"
#endif

namespace docmatch::dist {

namespace {

// What a collective of one rank returns: its result is its input, ready.
class CompletedWork : public Work {
 public:
  void Wait() override {}
};

}  // namespace

Communicator::Communicator(const torch::Device& device) : device_(ResolveDevice(device)) {}

void Communicator::CheckPayload(const char* op, const torch::Tensor& tensor) const {
  DOCMATCH_CHECK(tensor.defined(), "dist", op, ": an undefined tensor");
  DOCMATCH_CHECK(tensor.device() == device_ && tensor.is_floating_point(), "dist", op, " (", Name(backend()),
                 "): the data plane carries floating-point tensors on ", device_.str(), ", and got ",
                 tensor.scalar_type(), " on ", tensor.device().str(),
                 ". Counts, orders, flags and metric sums travel on the control plane (dist/control_plane.h) as host "
                 "values; data tensors belong on the run's device");
  // Every backend needs it, checked here once for all of them: one rank,
  // which launches nothing, refuses what several would.
  DOCMATCH_CHECK(tensor.is_contiguous(), "dist", op, " (", Name(backend()), "): collectives need contiguous tensors");
}

WorkHandle Communicator::AllReduceAsync(torch::Tensor tensor) {
  CheckPayload("all_reduce", tensor);
  // One rank: the sum is the tensor itself. Nothing to launch, so a
  // one-GPU run's step makes no NCCL call.
  if (size() == 1) return std::make_shared<CompletedWork>();
  return DoAllReduce(std::move(tensor));
}

void Communicator::CheckPair(const char* op, const torch::Tensor& input, const torch::Tensor& output) const {
  CheckPayload(op, input);
  CheckPayload(op, output);
  DOCMATCH_CHECK(input.scalar_type() == output.scalar_type(), "dist", op, ": input ", input.scalar_type(),
                 " and output ", output.scalar_type(), " differ");
}

WorkHandle Communicator::AllGatherAsync(torch::Tensor input, torch::Tensor output) {
  CheckPair("all_gather", input, output);
  return DoAllGather(std::move(input), std::move(output));
}

WorkHandle Communicator::AllGatherUnevenAsync(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) {
  CheckPair("all_gather (uneven)", input, output);
  return DoAllGatherUneven(std::move(input), std::move(output), std::move(counts));
}

WorkHandle Communicator::ReduceScatterUnevenAsync(torch::Tensor input, torch::Tensor output,
                                                  std::vector<int64_t> counts) {
  CheckPair("reduce_scatter", input, output);
  return DoReduceScatterUneven(std::move(input), std::move(output), std::move(counts));
}

WorkHandle Communicator::BroadcastAsync(torch::Tensor tensor, int root) {
  CheckPayload("broadcast", tensor);
  DOCMATCH_CHECK(root >= 0 && root < size(), "dist", "broadcast from rank ", root, " of ", size());
  if (size() == 1) return std::make_shared<CompletedWork>();  // the root's tensor is this one
  return DoBroadcast(std::move(tensor), root);
}

torch::Tensor Communicator::AllGather(const torch::Tensor& input) {
  std::vector<int64_t> shape = input.sizes().vec();
  TORCH_CHECK(!shape.empty(), "all_gather needs at least one dimension");
  shape[0] *= size();
  torch::Tensor output = torch::empty(shape, input.options());
  AllGatherAsync(input.contiguous(), output)->Wait();
  return output;
}

torch::Tensor Communicator::ReduceScatterUneven(const torch::Tensor& input, const std::vector<int64_t>& counts) {
  TORCH_CHECK(input.dim() >= 1, "reduce_scatter needs at least one dimension");
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] = counts.at(rank());
  torch::Tensor output = torch::empty(shape, input.options());
  ReduceScatterUnevenAsync(input.contiguous(), output, counts)->Wait();
  return output;
}

bool NcclPossible(const torch::Device& device, bool gpus_shared, bool distinct_hosts) {
#ifdef DOCMATCH_HAS_NCCL
  return device.is_cuda() && (!gpus_shared || distinct_hosts);
#else
  (void)device;
  (void)gpus_shared;
  (void)distinct_hosts;
  return false;
#endif
}

bool GiveEachRankItsOwnNcclHost(int rank) {
  const char* asked = std::getenv(kNcclHostPerRank);
  if (asked == nullptr || std::string(asked) != "1") return false;
  ::setenv("NCCL_SOCKET_IFNAME", "lo", /*overwrite=*/0);
  const char* given = std::getenv("NCCL_HOSTID");
  if (given != nullptr && *given != '\0') return false;  // the user's own ids stand
  ::setenv("NCCL_HOSTID", ("docmatch-rank-" + std::to_string(rank)).c_str(), /*overwrite=*/1);
  return true;
}

bool DistinctNcclHosts(ControlPlane& control) {
  // Each rank's id as a 64-bit FNV-1a hash (0: none), gathered: ids travel
  // as numbers on the control plane.
  const char* id = std::getenv("NCCL_HOSTID");
  uint64_t hash = 0;
  if (id != nullptr && *id != '\0') {
    hash = 1469598103934665603ULL;
    for (const char* c = id; *c != '\0'; ++c) hash = (hash ^ static_cast<unsigned char>(*c)) * 1099511628211ULL;
    hash |= 1;  // never 0
  }
  const std::vector<int64_t> all = control.AllGather(static_cast<int64_t>(hash));
  const std::set<int64_t> distinct(all.begin(), all.end());
  return !distinct.count(0) && distinct.size() == all.size();
}

const char* Name(Backend backend) {
  switch (backend) {
    case Backend::kAuto:
      return "auto";
    case Backend::kMpi:
      return "mpi";
    case Backend::kNccl:
      return "nccl";
  }
  return "?";
}

Backend ParseBackend(const std::string& text) {
  for (Backend backend : {Backend::kAuto, Backend::kMpi, Backend::kNccl}) {
    if (text == Name(backend)) return backend;
  }
  throw Error("dist", "--backend is auto, mpi or nccl, not '" + text + "'");
}

Backend AgreeOnBackend(Backend requested, bool nccl_possible, ControlPlane& control) {
  // Every rank learns every rank's answer, so all choose alike: a rank that
  // decided alone could enter MPI while its peers wait for NCCL's id.
  const bool everywhere = !control.Any(!nccl_possible);
  if (requested == Backend::kAuto) return everywhere ? Backend::kNccl : Backend::kMpi;
  DOCMATCH_CHECK(requested != Backend::kNccl || everywhere, "dist",
                 "--backend nccl needs one CUDA device per rank that no other rank of its node shares, or a host "
                 "identity per rank (DOCMATCH_NCCL_HOST_PER_RANK=1, launch --nccl-host-per-rank), and some rank has "
                 "neither: use --backend mpi (or auto) to share GPUs or run on CPUs");
#ifndef DOCMATCH_HAS_NCCL
  DOCMATCH_CHECK(requested != Backend::kNccl, "dist", "this docmatch was built without NCCL; use --backend mpi");
#endif
  return requested;
}

std::unique_ptr<Communicator> MakeCommunicator(Backend backend, const torch::Device& device,
                                               std::chrono::milliseconds timeout) {
  std::unique_ptr<Communicator> communicator;
  if (backend == Backend::kMpi) {
    communicator = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, device);
  } else if (backend == Backend::kNccl) {
#ifdef DOCMATCH_HAS_NCCL
    DOCMATCH_CHECK(device.is_cuda(), "dist", "the NCCL backend needs a CUDA device, got ", device.str());
    communicator = std::make_unique<NcclCommunicator>(device, timeout);
#else
    DOCMATCH_CHECK(false, "dist", "this docmatch was built without NCCL; use --backend mpi");
#endif
  } else {
    throw Error("dist", "a communicator is mpi or nccl; AgreeOnBackend decides auto first");
  }
  communicator->set_timeout(timeout);
  return communicator;
}

}  // namespace docmatch::dist
