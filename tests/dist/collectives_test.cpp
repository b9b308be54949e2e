// Every collective against a reference each rank computes for itself, for
// whatever world size mpirun gave (ctest runs 1, 2 and 3 ranks), equal and
// uneven sizes, several dtypes, sync and async: the data plane's (floating
// tensors on the run's device; anything else refused by name) and the
// control plane's (host values).
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "console/error.h"
#include "dist/communicator.h"
#include "dist/control_plane.h"
#include "dist/mpi_communicator.h"
#include "dist/process_group.h"

namespace docmatch::dist {
namespace {

class Collectives : public ::testing::Test {
 protected:
  MpiCommunicator comm_;
  ControlPlane control_;
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  // Rank r's contribution: (r + 1) * (i + 1), small integers exact in every dtype.
  torch::Tensor Contribution(int r, torch::ScalarType type) const {
    return ((r + 1) * (torch::arange(12, torch::kFloat64) + 1)).view({3, 4}).to(type);
  }
};

TEST_F(Collectives, AllReduceSumsEveryDtype) {
  for (auto type : {torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kHalf}) {
    torch::Tensor t = Contribution(rank(), type);
    comm_.AllReduce(t);
    torch::Tensor expected = torch::zeros({3, 4}, torch::kFloat64);
    for (int r = 0; r < size(); ++r) expected += Contribution(r, torch::kFloat64);
    EXPECT_TRUE(torch::equal(t.to(torch::kFloat64), expected)) << type;
    EXPECT_EQ(t.scalar_type(), type);
  }
}

// Metadata on the data plane is refused before any backend sees it, naming
// the operation and where it belongs; so is a tensor of another device.
TEST_F(Collectives, DataPlaneRefusesMetadataAndOtherDevices) {
  const auto refused = [&](const std::function<void()>& call, const std::string& words) {
    try {
      call();
      ADD_FAILURE() << "accepted: " << words;
    } catch (const docmatch::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(words), std::string::npos) << what;
      EXPECT_NE(what.find("control plane"), std::string::npos) << what;
    }
  };
  torch::Tensor order = torch::arange(4, torch::kInt64);
  refused([&] { comm_.Broadcast(order, 0); },
          "broadcast (mpi): the data plane carries floating-point tensors on cpu, "
          "and got Long on cpu");
  torch::Tensor flag = torch::tensor({true});
  refused([&] { comm_.AllReduce(flag); }, "all_reduce (mpi)");
  refused([&] { comm_.AllGather(torch::ones({2}, torch::kInt32)); }, "all_gather (mpi)");
  // The meta device stands in for a GPU here: a tensor not on the run's device.
  refused([&] { comm_.AllReduce(torch::empty({2}, torch::TensorOptions().device(torch::kMeta))); }, "on meta");
  // What every backend refuses, one rank (which launches nothing) refuses too.
  const auto refused_at_any_size = [&](const std::function<void()>& call, const std::string& words) {
    try {
      call();
      ADD_FAILURE() << "accepted: " << words;
    } catch (const docmatch::Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused_at_any_size([&] { comm_.AllReduce(torch::ones({2, 3}).t()); }, "need contiguous tensors");
  refused_at_any_size([&] { comm_.Broadcast(torch::ones({2}), size()); }, "broadcast from rank");
  // Nothing was sent: the next collective still pairs up on every rank.
  torch::Tensor t = torch::ones({2});
  comm_.AllReduce(t);
  EXPECT_EQ(t[0].item<float>(), static_cast<float>(size()));
}

// NCCL at one rank, on a machine with a GPU: all-reduce, broadcast and the
// barrier (an all-reduce) are checked and not launched there, but the
// gathers and the reduce-scatter still go through NCCL, so the GPU path's
// launch, its events, the watchdog and the communicator's teardown run on
// one GPU. Skipped without a GPU or
// NCCL, and at more ranks (NCCL refuses two ranks on one GPU).
TEST(NcclAtOneRank, GathersAndScattersRunOnTheGpuAndTheCommunicatorClosesCleanly) {
  int ranks = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
#ifndef DOCMATCH_HAS_NCCL
  GTEST_SKIP() << "built without NCCL";
#endif
  if (!torch::cuda::is_available() || ranks != 1) GTEST_SKIP() << "needs one rank and a GPU";
  const torch::Device gpu(torch::kCUDA, 0);
  const torch::Tensor rows = torch::arange(6, torch::TensorOptions(torch::kFloat).device(gpu)).reshape({3, 2});
  {
    const std::unique_ptr<Communicator> nccl = MakeCommunicator(Backend::kNccl, gpu, std::chrono::seconds(60));
    ASSERT_EQ(nccl->backend(), Backend::kNccl);
    EXPECT_TRUE(torch::equal(nccl->AllGather(rows).cpu(), rows.cpu()));
    torch::Tensor uneven = torch::zeros_like(rows);
    nccl->AllGatherUnevenAsync(rows, uneven, {3})->Wait();
    EXPECT_TRUE(torch::equal(uneven.cpu(), rows.cpu()));
    EXPECT_TRUE(torch::equal(nccl->ReduceScatterUneven(rows, {3}).cpu(), rows.cpu()));
    torch::Tensor summed = rows.clone();
    nccl->AllReduce(summed);  // one rank: the sum is the tensor itself
    EXPECT_TRUE(torch::equal(summed.cpu(), rows.cpu()));
  }  // the watchdog follows what is left to its end; then ncclCommDestroy
}

// The control plane against hand-computed values: counts, uneven values of
// each type (rank 0 holds none), sums, flags, broadcasts from every root.
TEST(ControlPlane, HostValuesMeetOnEveryRank) {
  ControlPlane control;
  const int n = control.size(), me = control.rank();
  const std::vector<int64_t> counts = control.AllGather(10 * me + 1);
  ASSERT_EQ(static_cast<int>(counts.size()), n);
  for (int r = 0; r < n; ++r) EXPECT_EQ(counts[r], 10 * r + 1);

  std::vector<int64_t> ids;
  for (int i = 0; i < me; ++i) ids.push_back(100 * me + i);
  std::vector<int64_t> held;
  const std::vector<int64_t> all_ids = control.AllGatherUneven(ids, &held);
  std::vector<int64_t> expected_ids;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(held[r], r);
    for (int i = 0; i < r; ++i) expected_ids.push_back(100 * r + i);
  }
  EXPECT_EQ(all_ids, expected_ids);
  const std::vector<double> all_scores = control.AllGatherUneven(std::vector<double>(me, 0.5 + me));
  EXPECT_EQ(static_cast<int>(all_scores.size()), n * (n - 1) / 2);
  if (n > 1) {
    EXPECT_EQ(all_scores.back(), 0.5 + (n - 1));
  }
  const std::vector<uint8_t> bytes = control.AllGatherUneven(std::vector<uint8_t>(3, static_cast<uint8_t>(me)));
  ASSERT_EQ(static_cast<int>(bytes.size()), 3 * n);
  for (int r = 0; r < n; ++r) EXPECT_EQ(bytes[3 * r + 2], r);

  std::vector<double> sums = {1.0 + me, 0.25};
  control.Sum(sums);
  EXPECT_DOUBLE_EQ(sums[0], n * (n + 1) / 2.0);
  EXPECT_DOUBLE_EQ(sums[1], 0.25 * n);
  std::vector<int64_t> totals = {me, 1};
  control.Sum(totals);
  EXPECT_EQ(totals[0], n * (n - 1) / 2);
  EXPECT_EQ(totals[1], n);

  EXPECT_FALSE(control.Any(false));
  EXPECT_TRUE(control.Any(me == n - 1));
  for (int root = 0; root < n; ++root) {
    std::vector<int64_t> order = {me, -1, me * 7};
    control.Broadcast(order, root);
    EXPECT_EQ(order, (std::vector<int64_t>{root, -1, root * 7})) << "root " << root;
  }
  control.Barrier();
}

TEST_F(Collectives, AllGatherEqualSizes) {
  for (auto type : {torch::kFloat32, torch::kFloat64, torch::kBFloat16}) {
    const torch::Tensor gathered = comm_.AllGather(Contribution(rank(), type).slice(0, 0, 2));
    std::vector<torch::Tensor> parts;
    for (int r = 0; r < size(); ++r) parts.push_back(Contribution(r, type).slice(0, 0, 2));
    EXPECT_TRUE(torch::equal(gathered, torch::cat(parts))) << type;
  }
}

TEST_F(Collectives, AllGatherUnevenSizesIncludingEmpty) {
  // Rank r holds r rows (rank 0 none), then r + 1 rows.
  for (int extra : {0, 1}) {
    auto rows_of = [&](int r) { return torch::full({r + extra, 2}, 10.0 * r) + torch::arange(2); };
    const std::vector<int64_t> counts = control_.AllGather(rank() + extra);  // row counts: host values
    torch::Tensor gathered = torch::empty({(size() * (size() - 1)) / 2 + extra * size(), 2});
    comm_.AllGatherUnevenAsync(rows_of(rank()), gathered, counts)->Wait();
    std::vector<torch::Tensor> parts;
    for (int r = 0; r < size(); ++r) {
      parts.push_back(rows_of(r));
      EXPECT_EQ(counts[r], r + extra);
    }
    EXPECT_TRUE(torch::equal(gathered, torch::cat(parts))) << "extra " << extra;
  }
}

TEST_F(Collectives, ReduceScatterUnevenKeepsThisRanksRowsOfTheSum) {
  // Every rank contributes a (total, 3) tensor that depends on the rank; rank
  // r keeps its counts[r] rows of the sum. Counts: equal, uneven, one empty.
  const int n = size();
  std::vector<std::vector<int64_t>> layouts = {std::vector<int64_t>(n, 2), {}, {}};
  for (int r = 0; r < n; ++r) layouts[1].push_back(r + 1);
  for (int r = 0; r < n; ++r) layouts[2].push_back(r == 0 ? 0 : 2 * r);
  for (const auto& counts : layouts) {
    int64_t total = 0, offset = 0;
    for (int r = 0; r < n; ++r) {
      if (r < rank()) offset += counts[r];
      total += counts[r];
    }
    auto contribution = [&](int r, torch::ScalarType type) {
      // Small integers (at most 6 * 9 summed): exact in bf16 too.
      return ((r + 1) * (torch::arange(total * 3, torch::kInt64) % 9 + 1)).view({total, 3}).to(type);
    };
    for (auto type : {torch::kFloat32, torch::kFloat64, torch::kBFloat16}) {
      const torch::Tensor mine = comm_.ReduceScatterUneven(contribution(rank(), type), counts);
      torch::Tensor expected = torch::zeros({total, 3}, torch::kFloat64);
      for (int r = 0; r < n; ++r) expected += contribution(r, type).to(torch::kFloat64);
      ASSERT_EQ(mine.size(0), counts[rank()]);
      EXPECT_EQ(mine.scalar_type(), type);
      EXPECT_TRUE(torch::equal(mine.to(torch::kFloat64), expected.slice(0, offset, offset + counts[rank()])))
          << type << ", rank " << rank() << " of " << n;
    }
  }
}

TEST_F(Collectives, BroadcastFromEveryRoot) {
  for (int root = 0; root < size(); ++root) {
    torch::Tensor t = rank() == root ? Contribution(root, torch::kFloat32) : torch::zeros({3, 4});
    comm_.Broadcast(t, root);
    EXPECT_TRUE(torch::equal(t, Contribution(root, torch::kFloat32))) << "root " << root;
  }
  comm_.Barrier();
}

TEST_F(Collectives, AsyncWorkCompletesInAnyWaitOrder) {
  torch::Tensor a = Contribution(rank(), torch::kFloat64);
  torch::Tensor input = torch::full({1, 3}, static_cast<double>(rank()), torch::kFloat64);
  torch::Tensor gathered = torch::empty({size(), 3}, torch::kFloat64);
  WorkHandle reduce = comm_.AllReduceAsync(a);
  WorkHandle gather = comm_.AllGatherAsync(input, gathered);
  WorkHandle barrier = comm_.BarrierAsync();
  barrier->Wait();
  gather->Wait();
  reduce->Wait();
  reduce->Wait();  // waiting twice is harmless
  EXPECT_DOUBLE_EQ(a[0][0].item<double>(), size() * (size() + 1) / 2.0);
  for (int r = 0; r < size(); ++r) EXPECT_DOUBLE_EQ(gathered[r][2].item<double>(), r);
}

TEST_F(Collectives, LargeMessageRoundTrips) {
  // 16 MB, beyond any eager-protocol threshold.
  torch::Tensor t = torch::full({4 << 20}, static_cast<float>(rank() + 1));
  comm_.AllReduce(t);
  EXPECT_EQ(t.min().item<float>(), size() * (size() + 1) / 2.0f);
  EXPECT_EQ(t.max().item<float>(), size() * (size() + 1) / 2.0f);
}

}  // namespace
}  // namespace docmatch::dist
