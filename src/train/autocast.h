// Mixed precision for training and validation: bf16 autocast around forward
// passes, float32 master weights.
#pragma once

#include <torch/torch.h>

#include "train/optimizer.h"

namespace docmatch::train {

// Forward passes under autocast while alive, for LoopOptions::precision
// bf16: matrix products in bfloat16 on the run's device (CUDA, or CPU),
// parameters and their optimizer state stay float32 (the master weights), and
// no loss scaling is needed (bf16 has float32's exponent range). fp32 does
// nothing. Run backward() after the guard ends.
class Autocast {
 public:
  Autocast(const torch::Device& device, Precision precision);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool active_ = false;
  at::DeviceType device_type_;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kFloat;
};

}  // namespace docmatch::train
