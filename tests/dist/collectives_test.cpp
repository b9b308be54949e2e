// Every collective against a reference each rank computes for itself, for
// whatever world size mpirun gave (ctest runs 1, 2 and 3 ranks), equal and
// uneven sizes, several dtypes, sync and async.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist/communicator.h"
#include "dist/mpi_communicator.h"

namespace docmatch::dist {
namespace {

class Collectives : public ::testing::Test {
 protected:
  MpiCommunicator comm_;
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  // Rank r's contribution: (r + 1) * (i + 1), small integers exact in every dtype.
  torch::Tensor Contribution(int r, torch::ScalarType type) const {
    return ((r + 1) * (torch::arange(12, torch::kFloat64) + 1)).view({3, 4}).to(type);
  }
};

TEST_F(Collectives, AllReduceSumsEveryDtype) {
  for (auto type : {torch::kFloat32, torch::kFloat64, torch::kInt32, torch::kInt64, torch::kBFloat16, torch::kHalf}) {
    torch::Tensor t = Contribution(rank(), type);
    comm_.AllReduce(t);
    torch::Tensor expected = torch::zeros({3, 4}, torch::kFloat64);
    for (int r = 0; r < size(); ++r) expected += Contribution(r, torch::kFloat64);
    EXPECT_TRUE(torch::equal(t.to(torch::kFloat64), expected)) << type;
    EXPECT_EQ(t.scalar_type(), type);
  }
  torch::Tensor flag = torch::tensor({rank() == size() - 1, false});
  comm_.AllReduce(flag);  // bool reduces with logical or
  EXPECT_TRUE(flag[0].item<bool>());
  EXPECT_FALSE(flag[1].item<bool>());
}

TEST_F(Collectives, AllGatherEqualSizes) {
  for (auto type : {torch::kFloat32, torch::kInt64, torch::kBFloat16}) {
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
    std::vector<int64_t> counts;
    const torch::Tensor gathered = comm_.AllGatherUneven(rows_of(rank()), &counts);
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
    for (auto type : {torch::kFloat32, torch::kFloat64, torch::kInt64, torch::kBFloat16}) {
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
