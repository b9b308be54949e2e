// All-gather with gradient: on N ranks, each rank scores its own rows against
// every rank's rows; the gradients must equal those one process gets from the
// same losses over the concatenated batch.
#include "dist/all_gather.h"

#include <gtest/gtest.h>

#include "dist/process_group.h"
#include "model/losses.h"

namespace docmatch::dist {
namespace {

// Rank r's rows: r + 2 of them (uneven), float64, fixed by r.
torch::Tensor RowsOf(int r) {
  torch::manual_seed(100 + r);
  return torch::randn({r + 2, 5}, torch::kFloat64);
}

TEST(AllGatherWithGrad, GradientsEqualOneProcessOverTheWholeBatch) {
  ProcessGroup comm;
  const torch::Tensor projection = [] {
    torch::manual_seed(7);
    return torch::randn({5, 5}, torch::kFloat64);
  }();

  // Distributed: local predictions against the gathered pool, positive = own row.
  torch::Tensor local = RowsOf(comm.rank()).requires_grad_(true);
  const Gathered pool = AllGatherWithGrad(local, comm);
  const torch::Tensor positive = torch::arange(local.size(0)) + pool.offset;
  const torch::Tensor local_loss = model::SentenceBlockLoss(torch::matmul(local, projection), pool.all, positive) *
                                   local.size(0);  // sum over this rank's rows
  local_loss.backward();

  // One process: the same per-rank losses over the concatenated batch.
  std::vector<torch::Tensor> all;
  for (int r = 0; r < comm.size(); ++r) all.push_back(RowsOf(r).requires_grad_(true));
  const torch::Tensor everything = torch::cat(all);
  torch::Tensor total = torch::zeros({}, torch::kFloat64);
  int64_t offset = 0;
  for (int r = 0; r < comm.size(); ++r) {
    const torch::Tensor positives = torch::arange(all[r].size(0)) + offset;
    total = total + model::SentenceBlockLoss(torch::matmul(all[r], projection), everything, positives) * all[r].size(0);
    offset += all[r].size(0);
  }
  total.backward();

  EXPECT_EQ(pool.offset, comm.rank() * (comm.rank() + 3) / 2);  // sum of (r + 2) for r < rank
  EXPECT_TRUE(torch::allclose(local.grad(), all[comm.rank()].grad(), 1e-12, 1e-12));
  // And the summed loss agrees.
  torch::Tensor summed = local_loss.detach().clone().view({1});
  comm.data().AllReduce(summed);
  EXPECT_NEAR(summed.item<double>(), total.item<double>(), 1e-10);
}

}  // namespace
}  // namespace docmatch::dist
