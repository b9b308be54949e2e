// Gradient caching: chunks forward without a graph, the objective's gradient
// with respect to their outputs, then one re-run per chunk (grad_cache.h).
#include "train/grad_cache.h"

#include <ATen/autocast_mode.h>

#include <memory>

#include "console/error.h"
#include "train/autocast.h"

namespace docmatch::train {
namespace {

// The default generators dropout draws from: the CPU's, and the device's.
class RandomState {
 public:
  explicit RandomState(const torch::Device& device) : device_(device) {
    cpu_ = Get(torch::Device(torch::kCPU));
    if (!device.is_cpu()) accelerator_ = Get(device);
  }
  void Restore() const {
    Set(torch::Device(torch::kCPU), cpu_);
    if (!device_.is_cpu()) Set(device_, accelerator_);
  }

 private:
  static torch::Tensor Get(const torch::Device& device) {
    at::Generator generator = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(generator.mutex());
    return generator.get_state();
  }
  static void Set(const torch::Device& device, const torch::Tensor& state) {
    at::Generator generator = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  }
  torch::Device device_;
  torch::Tensor cpu_, accelerator_;
};

bool Differentiable(const torch::Tensor& t) { return t.defined() && t.is_floating_point(); }

// The chunks' outputs as one: rows concatenated, sums and counts added.
ChunkOutputs Join(const std::vector<ChunkOutputs>& chunks) {
  ChunkOutputs joined;
  const ChunkOutputs& first = chunks.front();
  for (size_t r = 0; r < first.rows.size(); ++r) {
    std::vector<torch::Tensor> parts;
    for (const ChunkOutputs& c : chunks) parts.push_back(c.rows[r]);
    joined.rows.push_back(torch::cat(parts));
  }
  for (size_t s = 0; s < first.sums.size(); ++s) {
    torch::Tensor total = first.sums[s];
    for (size_t c = 1; c < chunks.size(); ++c) total = total + chunks[c].sums[s];
    joined.sums.push_back(total);
  }
  for (size_t k = 0; k < first.counts.size(); ++k) {
    int64_t total = 0;
    for (const ChunkOutputs& c : chunks) total += c.counts[k];
    joined.counts.push_back(total);
  }
  return joined;
}

}  // namespace

Objective CachedObjective(int64_t chunks, const std::function<ChunkOutputs(int64_t)>& forward,
                          const std::function<Objective(const ChunkOutputs&)>& objective, const torch::Device& device) {
  DOCMATCH_CHECK(chunks > 0, "train", "gradient caching needs at least one chunk");
  std::vector<ChunkOutputs> outputs;
  if (!torch::GradMode::is_enabled()) {
    for (int64_t i = 0; i < chunks; ++i) outputs.push_back(forward(i));
    return objective(Join(outputs));
  }
  // 1. Every chunk, remembering the random state it drew from, its graph
  // dropped as soon as the chunk is done (its outputs detached), so one
  // chunk's activations are alive at a time. Not under NoGradGuard: without
  // gradients SDPA may pick another kernel on CUDA and draw dropout from the
  // generator differently, and the re-run in step 3 must draw the same.
  auto states = std::make_shared<std::vector<RandomState>>();
  for (int64_t i = 0; i < chunks; ++i) {
    states->emplace_back(device);
    ChunkOutputs out = forward(i);
    for (auto* group : {&out.rows, &out.sums}) {
      for (torch::Tensor& t : *group) {
        if (t.defined()) t = t.detach();
      }
    }
    outputs.push_back(std::move(out));
  }
  // 2. The objective over leaf copies of all outputs, and its gradient with
  // respect to each.
  ChunkOutputs leaves = Join(outputs);
  std::vector<torch::Tensor> inputs;
  for (auto* group : {&leaves.rows, &leaves.sums}) {
    for (torch::Tensor& t : *group) {
      if (Differentiable(t)) inputs.push_back(t.requires_grad_(true));
    }
  }
  Objective result = objective(leaves);
  std::vector<torch::Tensor> grads(inputs.size());
  if (result.loss.requires_grad()) {
    grads = torch::autograd::grad({result.loss}, inputs, /*grad_outputs=*/{}, /*retain_graph=*/false,
                                  /*create_graph=*/false, /*allow_unused=*/true);
  }
  result.loss = result.loss.detach();

  // Each chunk's share of the cached gradients, in the order forward(i) gives its outputs.
  auto cached = std::make_shared<std::vector<std::vector<torch::Tensor>>>(chunks);
  std::vector<int64_t> offsets(leaves.rows.size(), 0);
  for (int64_t i = 0; i < chunks; ++i) {
    size_t k = 0;
    for (size_t r = 0; r < leaves.rows.size(); ++r) {
      const int64_t n = outputs[i].rows[r].size(0);
      torch::Tensor g;
      if (Differentiable(leaves.rows[r])) {
        if (grads[k].defined()) g = grads[k].narrow(0, offsets[r], n);
        ++k;
      }
      (*cached)[i].push_back(g);
      offsets[r] += n;
    }
    for (size_t s = 0; s < leaves.sums.size(); ++s) {
      torch::Tensor g;
      if (Differentiable(leaves.sums[s])) g = grads[k++];
      (*cached)[i].push_back(g);  // the sum's gradient is each chunk's part's
    }
  }
  // 3. Re-run each chunk with a graph, in the random state and autocast of
  // its first pass, and back-propagate its cached gradients.
  const bool autocast = at::autocast::is_autocast_enabled(device.type());
  result.backward = [chunks, forward, states, cached, autocast, device](double scale,
                                                                        const std::function<void(bool last)>& prepare) {
    for (int64_t i = 0; i < chunks; ++i) {
      (*states)[i].Restore();
      ChunkOutputs out;
      {
        const Autocast guard(device, autocast ? Precision::kBf16 : Precision::kFp32);
        out = forward(i);
      }
      std::vector<torch::Tensor> tensors, gradients;
      size_t k = 0;
      for (auto* group : {&out.rows, &out.sums}) {
        for (const torch::Tensor& t : *group) {
          const torch::Tensor& g = (*cached)[i][k++];
          if (g.defined() && t.requires_grad()) {
            tensors.push_back(t);
            gradients.push_back((g * scale).to(t.dtype()));
          }
        }
      }
      prepare(i + 1 == chunks);
      if (!tensors.empty()) torch::autograd::backward(tensors, gradients);
    }
  };
  return result;
}

Objective ChunkedContrastive(int64_t chunks, std::function<ContrastivePairs(int64_t)> embed,
                             const model::Temperature& temperature, dist::ProcessGroup& group,
                             const RelatedPairs* related) {
  return ChunkedPairObjective(
      chunks, std::move(embed), temperature,
      [&](const ContrastivePairs& pairs, const model::Temperature& t) { return Contrastive(pairs, t, group, related); },
      group.device());
}

Objective ChunkedPairObjective(int64_t chunks, std::function<ContrastivePairs(int64_t)> embed,
                               const model::Temperature& temperature, const PairObjective& objective,
                               const torch::Device& device) {
  if (chunks == 1) return objective(embed(0), temperature);
  const torch::Tensor log_scale = temperature.log_scale();
  return CachedObjective(
      chunks,
      [embed, chunks, log_scale](int64_t i) {
        const ContrastivePairs p = embed(i);
        ChunkOutputs out{{p.sources, p.targets, p.negatives, p.source_ids, p.target_ids, p.negative_ids}, {}, {}};
        // `* 1`: no graph in the first pass, through the parameter in the re-run.
        if (log_scale.defined()) out.sums.push_back(i + 1 == chunks ? log_scale * 1 : torch::zeros_like(log_scale));
        return out;
      },
      [&](const ChunkOutputs& all) {
        const std::vector<torch::Tensor>& r = all.rows;
        const model::Temperature t = temperature.learned() ? model::Temperature::Learned(all.sums.at(0)) : temperature;
        return objective(ContrastivePairs{r[0], r[1], r[3], r[4], r[2], r[5]}, t);
      },
      device);
}

}  // namespace docmatch::train
