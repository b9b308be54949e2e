// Host arrays onto the run's device without the host waiting for the
// device. A copy from pageable host memory to a GPU first waits for the
// device's queue to drain (CUDA's rule for pageable memory), so every
// batch, index and id list that reaches a GPU goes through pinned memory,
// asynchronously, in its own narrow type, and is widened there (int32 token
// ids cross at half an int64's bytes). Every model's ToTensors and the
// objectives' id lists call this; nothing else copies a batch to a device.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace docmatch::model {

// host: a CPU tensor (a view of a batch's array is enough: the result never
// shares its memory) -> a `target` tensor on `device`.
inline torch::Tensor HostToDevice(const torch::Tensor& host, const torch::Device& device, torch::ScalarType target) {
  if (!device.is_cuda()) return host.to(device, target, /*non_blocking=*/false, /*copy=*/true);
  return host.pin_memory().to(device, /*non_blocking=*/true).to(target);
}

// A batch's host array of `type`, viewed in place, as a `target` tensor on `device`.
inline torch::Tensor HostToDevice(const void* data, std::vector<int64_t> shape, torch::ScalarType type,
                                  const torch::Device& device, torch::ScalarType target) {
  return HostToDevice(torch::from_blob(const_cast<void*>(data), shape, type), device, target);
}

// The positions that carry a label (not `ignore`) in host label arrays read
// one after another, as an int64 index on `device`: the rows a masked LM
// predicts, found on the host instead of by a boolean index of device labels
// (a nonzero(), whose count would come back to the host).
inline torch::Tensor LabelledPositions(const std::vector<const std::vector<int32_t>*>& parts, int32_t ignore,
                                       const torch::Device& device) {
  std::vector<int64_t> positions;
  int64_t offset = 0;
  for (const std::vector<int32_t>* labels : parts) {
    for (size_t i = 0; i < labels->size(); ++i) {
      if ((*labels)[i] != ignore) positions.push_back(offset + static_cast<int64_t>(i));
    }
    offset += static_cast<int64_t>(labels->size());
  }
  return HostToDevice(positions.data(), {static_cast<int64_t>(positions.size())}, torch::kInt64, device, torch::kLong);
}

}  // namespace docmatch::model
