// All-gather with gradient: the forward gathers every rank's rows (uneven
// counts allowed); the backward sums, over ranks, the gradient each rank's
// loss puts on the gathered tensor and returns this rank's slice. So a loss
// computed locally against gathered candidates (the "local loss" form) trains
// each rank's inputs exactly as one process holding the whole batch would.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "dist/process_group.h"

namespace docmatch::dist {

struct Gathered {
  torch::Tensor all;            // (sum of rows, ...) every rank's rows, in rank order
  int64_t offset = 0;           // first row of this rank's rows in `all`
  std::vector<int64_t> counts;  // rows per rank
};

// local (n_r, ...) -> Gathered; differentiable with respect to `local`. The
// row counts cross on the control plane (host values, no device sync), the
// rows on the data plane.
Gathered AllGatherWithGrad(const torch::Tensor& local, ProcessGroup& group);

}  // namespace docmatch::dist
