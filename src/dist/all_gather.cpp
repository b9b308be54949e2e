// The autograd function behind AllGatherWithGrad: gather forward, sum over
// ranks and keep this rank's slice backward, in one reduce-scatter
// (all_gather.h).
#include "dist/all_gather.h"

#include <numeric>

namespace docmatch::dist {
namespace {

struct AllGatherFunction : public torch::autograd::Function<AllGatherFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& local,
                               Communicator* communicator, std::vector<int64_t> counts) {
    ctx->saved_data["counts"] = counts;
    ctx->saved_data["communicator"] = reinterpret_cast<int64_t>(communicator);
    std::vector<int64_t> shape = local.sizes().vec();
    shape[0] = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    torch::Tensor all = torch::empty(shape, local.options());
    communicator->AllGatherUnevenAsync(local.contiguous(), all, counts)->Wait();
    return all;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* communicator = reinterpret_cast<Communicator*>(ctx->saved_data["communicator"].toInt());
    const std::vector<int64_t> counts = ctx->saved_data["counts"].toIntVector();
    // Every rank's loss may touch every row: sum the gradients over ranks,
    // but only this rank's rows of the sum are needed here. A reduce-scatter
    // moves half the bytes of all-reduce-then-slice.
    torch::Tensor mine = communicator->ReduceScatterUneven(grads[0].contiguous(), counts);
    return {mine, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

Gathered AllGatherWithGrad(const torch::Tensor& local, ProcessGroup& group) {
  Gathered out;
  if (group.size() == 1) {  // nothing to gather: the rows themselves, and no copy
    out.counts = {local.size(0)};
    out.all = local;
    return out;
  }
  // Row counts first (host values), so the gather itself is one call.
  out.counts = group.control().AllGather(local.size(0));
  out.offset = std::accumulate(out.counts.begin(), out.counts.begin() + group.rank(), int64_t{0});
  out.all = AllGatherFunction::apply(local, &group.data(), out.counts);
  return out;
}

}  // namespace docmatch::dist
