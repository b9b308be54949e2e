// bf16 autocast while a guard lives (autocast.h).
#include "train/autocast.h"

#include <ATen/autocast_mode.h>

namespace docmatch::train {

Autocast::Autocast(const torch::Device& device, Precision precision) : device_type_(device.type()) {
  if (precision == Precision::kFp32) return;
  active_ = true;
  was_enabled_ = at::autocast::is_autocast_enabled(device_type_);
  was_dtype_ = at::autocast::get_autocast_dtype(device_type_);
  at::autocast::set_autocast_enabled(device_type_, true);
  at::autocast::set_autocast_dtype(device_type_, at::kBFloat16);
  at::autocast::increment_nesting();
}

Autocast::~Autocast() {
  if (!active_) return;
  // Casts of the weights are cached for one forward pass; the optimizer step
  // changes the weights, so the cache goes when the outermost guard ends.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, was_enabled_);
  at::autocast::set_autocast_dtype(device_type_, was_dtype_);
}

}  // namespace docmatch::train
