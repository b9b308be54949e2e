// The autograd function behind AllGatherWithGrad: gather forward, sum over
// ranks and keep this rank's slice backward (all_gather.h).
#include "dist/all_gather.h"

#include <numeric>

namespace docmatch::dist {
namespace {

struct AllGatherFunction : public torch::autograd::Function<AllGatherFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& local,
                               Communicator* communicator, int64_t offset, std::vector<int64_t> counts) {
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["rows"] = local.size(0);
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
    const int64_t offset = ctx->saved_data["offset"].toInt(), rows = ctx->saved_data["rows"].toInt();
    // Every rank's loss may touch every row: sum the gradients over ranks.
    torch::Tensor total = grads[0].contiguous().clone();
    communicator->AllReduce(total);
    return {total.slice(0, offset, offset + rows), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

Gathered AllGatherWithGrad(const torch::Tensor& local, Communicator& communicator) {
  Gathered out;
  // Row counts first (a tiny all-reduce), so the gather itself is one call.
  out.counts = communicator.ExchangeCounts(local.size(0), local.device());
  out.offset = std::accumulate(out.counts.begin(), out.counts.begin() + communicator.rank(), int64_t{0});
  out.all = AllGatherFunction::apply(local, &communicator, out.offset, out.counts);
  return out;
}

}  // namespace docmatch::dist
