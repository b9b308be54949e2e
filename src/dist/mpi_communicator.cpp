// Collectives as non-blocking MPI calls on a private communicator, CUDA tensors
// staged through host memory (mpi_communicator.h).
#include "dist/mpi_communicator.h"

#include "console/error.h"
#include "dist/peer_probe.h"

#include <glog/logging.h>

#include <functional>
#include <limits>
#include <mutex>
#include <numeric>
#include <sstream>
#include <thread>

namespace docmatch::dist {
namespace {

// Element-wise sums for the 16-bit float types MPI does not know.
template <typename T>
void SumOf(void* in, void* inout, int* length, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *length; ++i) b[i] = static_cast<T>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

struct MpiType {
  MPI_Datatype type;
  MPI_Op sum;
};

MpiType TypeOf(const torch::Tensor& t) {
  static std::once_flag once;
  static MPI_Op bf16_sum, half_sum;
  std::call_once(once, [] {
    MPI_Op_create(&SumOf<c10::BFloat16>, /*commute=*/1, &bf16_sum);
    MPI_Op_create(&SumOf<c10::Half>, /*commute=*/1, &half_sum);
  });
  switch (t.scalar_type()) {
    case torch::kFloat32:
      return {MPI_FLOAT, MPI_SUM};
    case torch::kFloat64:
      return {MPI_DOUBLE, MPI_SUM};
    case torch::kInt32:
      return {MPI_INT32_T, MPI_SUM};
    case torch::kInt64:
      return {MPI_INT64_T, MPI_SUM};
    case torch::kUInt8:
      return {MPI_UINT8_T, MPI_SUM};
    case torch::kInt8:
      return {MPI_INT8_T, MPI_SUM};
    case torch::kBool:
      return {MPI_C_BOOL, MPI_LOR};
    case torch::kBFloat16:
      return {MPI_UINT16_T, bf16_sum};
    case torch::kHalf:
      return {MPI_UINT16_T, half_sum};
    default:
      DOCMATCH_CHECK(false, "dist", "MPI backend: unsupported dtype ", t.scalar_type());
  }
}

int Count(int64_t elements, const char* what) {
  DOCMATCH_CHECK(elements <= std::numeric_limits<int>::max(), "dist", what, " of ", elements,
                 " elements exceeds MPI's int count; split the tensor");
  return static_cast<int>(elements);
}

// One pending MPI request. Holds the tensors it reads and writes; `finish`
// copies staged results back to the device.
class MpiWork : public Work {
 public:
  MpiWork(Pending pending, std::vector<torch::Tensor> keep, std::function<void()> finish)
      : pending_(std::move(pending)), keep_(std::move(keep)), finish_(std::move(finish)) {}
  MPI_Request* request() { return &request_; }

  void Progress() override {
    if (!complete_) MPI_Test(&request_, &complete_, MPI_STATUS_IGNORE);
  }

  void Wait() override {
    if (done_) return;
    WaitOrAbort(pending_, [this] {
      Progress();
      return complete_ != 0;
    });
    done_ = true;
    if (finish_) finish_();
  }

 private:
  Pending pending_;
  std::vector<torch::Tensor> keep_;
  std::function<void()> finish_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  int complete_ = 0;   // MPI says the request is complete
  bool done_ = false;  // and `finish` has run
};

// The host tensor MPI works on, and how to bring the result back.
struct Staged {
  torch::Tensor host;
  std::function<void()> finish;
};

Staged Stage(const torch::Tensor& tensor, bool copy_in, bool copy_out) {
  if (!tensor.is_cuda()) return {tensor, nullptr};
  torch::Tensor host =
      copy_in ? tensor.to(torch::kCPU) : torch::empty(tensor.sizes(), tensor.options().device(torch::kCPU));
  std::function<void()> finish;
  if (copy_out) finish = [tensor, host]() mutable { tensor.copy_(host); };
  return {host, finish};
}

std::string Describe(const char* op, const torch::Tensor& t) {
  std::ostringstream s;
  s << op << " of " << t.numel() * t.element_size() << " bytes (" << t.scalar_type() << ")";
  return s.str();
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm base, const torch::Device& device)
    : Communicator(device),
      comm_(base),
      probe_(std::make_shared<PeerProbe>(base)),
      rank_(comm_.rank()),
      size_(comm_.size()) {}

WorkHandle MpiCommunicator::DoAllReduce(torch::Tensor tensor) {
  Staged staged = Stage(tensor, /*copy_in=*/true, /*copy_out=*/true);
  const MpiType type = TypeOf(tensor);
  auto work = std::make_shared<MpiWork>(probe_->Start(Describe("all_reduce", tensor), timeout_),
                                        std::vector<torch::Tensor>{tensor, staged.host}, staged.finish);
  MPI_Iallreduce(MPI_IN_PLACE, staged.host.data_ptr(), Count(tensor.numel(), "all_reduce"), type.type, type.sum,
                 comm_.get(), work->request());
  return work;
}

WorkHandle MpiCommunicator::DoAllGather(torch::Tensor input, torch::Tensor output) {
  DOCMATCH_CHECK(output.numel() == input.numel() * size_, "dist", "all_gather: output holds ", output.numel(),
                 " elements, expected ", input.numel() * size_);
  DOCMATCH_CHECK(output.scalar_type() == input.scalar_type(), "dist", "all_gather: dtypes differ");
  Staged in = Stage(input, true, false), out = Stage(output, false, true);
  const MpiType type = TypeOf(input);
  auto work = std::make_shared<MpiWork>(probe_->Start(Describe("all_gather", input), timeout_),
                                        std::vector<torch::Tensor>{input, output, in.host, out.host}, out.finish);
  const int count = Count(input.numel(), "all_gather");
  MPI_Iallgather(in.host.data_ptr(), count, type.type, out.host.data_ptr(), count, type.type, comm_.get(),
                 work->request());
  return work;
}

WorkHandle MpiCommunicator::DoAllGatherUneven(torch::Tensor input, torch::Tensor output, std::vector<int64_t> counts) {
  DOCMATCH_CHECK(static_cast<int>(counts.size()) == size_, "dist", "all_gather (uneven): ", counts.size(),
                 " counts for ", size_, " ranks");
  DOCMATCH_CHECK(counts[rank_] == input.size(0), "dist", "all_gather (uneven): rank ", rank_, " says ", counts[rank_],
                 " rows but holds ", input.size(0));
  const int64_t row = input.dim() > 0 && input.size(0) > 0 ? input.numel() / input.size(0)
                                                           : (output.size(0) > 0 ? output.numel() / output.size(0) : 1);
  std::vector<int> receive(size_), displacement(size_);
  int64_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    receive[r] = Count(counts[r] * row, "all_gather (uneven)");
    displacement[r] = Count(offset, "all_gather (uneven)");
    offset += counts[r] * row;
  }
  DOCMATCH_CHECK(output.numel() == offset, "dist", "all_gather (uneven): output holds ", output.numel(),
                 " elements, expected ", offset);
  Staged in = Stage(input, true, false), out = Stage(output, false, true);
  const MpiType type = TypeOf(input);
  // Non-blocking MPI may read the count arrays until completion: the work owns them.
  auto arrays = std::make_shared<std::pair<std::vector<int>, std::vector<int>>>(receive, displacement);
  auto work = std::make_shared<MpiWork>(probe_->Start(Describe("all_gather (uneven)", input), timeout_),
                                        std::vector<torch::Tensor>{input, output, in.host, out.host},
                                        [arrays, finish = out.finish] {
                                          if (finish) finish();
                                        });
  MPI_Iallgatherv(in.host.data_ptr(), receive[rank_], type.type, out.host.data_ptr(), arrays->first.data(),
                  arrays->second.data(), type.type, comm_.get(), work->request());
  return work;
}

WorkHandle MpiCommunicator::DoReduceScatterUneven(torch::Tensor input, torch::Tensor output,
                                                  std::vector<int64_t> counts) {
  DOCMATCH_CHECK(static_cast<int>(counts.size()) == size_, "dist", "reduce_scatter (uneven): ", counts.size(),
                 " counts for ", size_, " ranks");
  DOCMATCH_CHECK(output.dim() >= 1 && counts[rank_] == output.size(0), "dist", "reduce_scatter (uneven): rank ", rank_,
                 " expects ", counts[rank_], " rows but its output holds ", output.dim() ? output.size(0) : 0);
  DOCMATCH_CHECK(output.scalar_type() == input.scalar_type(), "dist", "reduce_scatter: dtypes differ");
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  DOCMATCH_CHECK(input.dim() >= 1 && input.size(0) == total, "dist", "reduce_scatter (uneven): input holds ",
                 input.dim() ? input.size(0) : 0, " rows, the counts add up to ", total);
  const int64_t row = total > 0 ? input.numel() / total : 0;
  std::vector<int> receive(size_);
  for (int r = 0; r < size_; ++r) receive[r] = Count(counts[r] * row, "reduce_scatter (uneven)");
  Staged in = Stage(input, true, false), out = Stage(output, false, true);
  const MpiType type = TypeOf(input);
  auto arrays = std::make_shared<std::vector<int>>(receive);
  auto work = std::make_shared<MpiWork>(probe_->Start(Describe("reduce_scatter", input), timeout_),
                                        std::vector<torch::Tensor>{input, output, in.host, out.host},
                                        [arrays, finish = out.finish] {
                                          if (finish) finish();
                                        });
  MPI_Ireduce_scatter(in.host.data_ptr(), out.host.data_ptr(), arrays->data(), type.type, type.sum, comm_.get(),
                      work->request());
  return work;
}

WorkHandle MpiCommunicator::DoBroadcast(torch::Tensor tensor, int root) {
  DOCMATCH_CHECK(root >= 0 && root < size_, "dist", "broadcast from rank ", root, " of ", size_);
  Staged staged = Stage(tensor, rank_ == root, true);
  const MpiType type = TypeOf(tensor);
  auto work = std::make_shared<MpiWork>(probe_->Start(Describe("broadcast", tensor), timeout_),
                                        std::vector<torch::Tensor>{tensor, staged.host}, staged.finish);
  MPI_Ibcast(staged.host.data_ptr(), Count(tensor.numel(), "broadcast"), type.type, root, comm_.get(), work->request());
  return work;
}

WorkHandle MpiCommunicator::BarrierAsync() {
  auto work = std::make_shared<MpiWork>(probe_->Start("barrier", timeout_), std::vector<torch::Tensor>{}, nullptr);
  MPI_Ibarrier(comm_.get(), work->request());
  return work;
}

}  // namespace docmatch::dist
