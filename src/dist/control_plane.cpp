// Host values over non-blocking MPI on a private communicator, each wait
// bounded by the timeout that names the stalled rank (control_plane.h).
#include "dist/control_plane.h"

#include <c10/util/Exception.h>

#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "console/error.h"
#include "dist/peer_probe.h"

namespace docmatch::dist {
namespace {

template <typename T>
MPI_Datatype TypeOf();
template <>
MPI_Datatype TypeOf<int64_t>() {
  return MPI_INT64_T;
}
template <>
MPI_Datatype TypeOf<double>() {
  return MPI_DOUBLE;
}
template <>
MPI_Datatype TypeOf<uint8_t>() {
  return MPI_UINT8_T;
}

int Count(size_t elements, const char* what) {
  DOCMATCH_CHECK(elements <= static_cast<size_t>(std::numeric_limits<int>::max()), "dist", "control plane: ", what,
                 " of ", elements, " values exceeds MPI's int count");
  return static_cast<int>(elements);
}

}  // namespace

ControlPlane::ControlPlane(MPI_Comm base) : comm_(base), probe_(std::make_shared<PeerProbe>(base)) {}

void ControlPlane::Wait(MPI_Request* request, const char* what) {
  int complete = 0;
  WaitOrAbort(probe_->Start(std::string(what) + " (control plane)", timeout_), [&] {
    MPI_Test(request, &complete, MPI_STATUS_IGNORE);
    return complete != 0;
  });
}

std::vector<int64_t> ControlPlane::AllGather(int64_t value) {
  std::vector<int64_t> all(size());
  MPI_Request request;
  MPI_Iallgather(&value, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, comm_.get(), &request);
  Wait(&request, "all_gather of counts");
  return all;
}

template <typename T>
std::vector<T> ControlPlane::AllGatherUneven(const std::vector<T>& values, std::vector<int64_t>* counts_out) {
  const std::vector<int64_t> counts = AllGather(static_cast<int64_t>(values.size()));
  std::vector<int> receive(size()), displacements(size());
  size_t total = 0;
  for (int r = 0; r < size(); ++r) {
    displacements[r] = Count(total, "all_gather (uneven)");
    receive[r] = Count(static_cast<size_t>(counts[r]), "all_gather (uneven)");
    total += static_cast<size_t>(counts[r]);
  }
  std::vector<T> all(total);
  MPI_Request request;
  MPI_Iallgatherv(values.data(), receive[rank()], TypeOf<T>(), all.data(), receive.data(), displacements.data(),
                  TypeOf<T>(), comm_.get(), &request);
  Wait(&request, "all_gather (uneven) of values");
  if (counts_out) *counts_out = counts;
  return all;
}

template std::vector<int64_t> ControlPlane::AllGatherUneven(const std::vector<int64_t>&, std::vector<int64_t>*);
template std::vector<double> ControlPlane::AllGatherUneven(const std::vector<double>&, std::vector<int64_t>*);
template std::vector<uint8_t> ControlPlane::AllGatherUneven(const std::vector<uint8_t>&, std::vector<int64_t>*);

void ControlPlane::Sum(std::vector<double>& values) {
  MPI_Request request;
  MPI_Iallreduce(MPI_IN_PLACE, values.data(), Count(values.size(), "sum"), MPI_DOUBLE, MPI_SUM, comm_.get(), &request);
  Wait(&request, "sum of values");
}

void ControlPlane::Sum(std::vector<int64_t>& values) {
  MPI_Request request;
  MPI_Iallreduce(MPI_IN_PLACE, values.data(), Count(values.size(), "sum"), MPI_INT64_T, MPI_SUM, comm_.get(), &request);
  Wait(&request, "sum of counts");
}

bool ControlPlane::Any(bool flag) {
  int value = flag ? 1 : 0;
  MPI_Request request;
  MPI_Iallreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_MAX, comm_.get(), &request);
  Wait(&request, "flag");
  return value != 0;
}

void ControlPlane::Broadcast(std::vector<int64_t>& values, int root) {
  DOCMATCH_CHECK(root >= 0 && root < size(), "dist", "control plane: broadcast from rank ", root, " of ", size());
  MPI_Request request;
  MPI_Ibcast(values.data(), Count(values.size(), "broadcast"), MPI_INT64_T, root, comm_.get(), &request);
  Wait(&request, "broadcast of values");
}

void ControlPlane::Barrier() {
  MPI_Request request;
  MPI_Ibarrier(comm_.get(), &request);
  Wait(&request, "barrier");
}

}  // namespace docmatch::dist
