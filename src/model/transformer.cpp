// Attention (fused and plain), the transformer layer and stack, and the packed
// real-token path the sentence encoders run on (transformer.h).
#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "console/error.h"
#include "data/text/tokenizer.h"
#include "model/host_to_device.h"

namespace docmatch::model {

torch::Tensor EncodeRowsWithoutGraph(const int32_t* tokens, int64_t rows, int64_t T, const torch::Device& device,
                                     int64_t rows_per_pass,
                                     const std::function<torch::Tensor(const torch::Tensor&)>& encode) {
  DOCMATCH_CHECK(rows_per_pass > 0, "model", "rows_per_pass must be positive, got ", rows_per_pass);
  torch::NoGradGuard no_grad;
  std::vector<int64_t> length(rows, 1);  // to the last real token; an empty row reads its first
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = T - 1; t > 0; --t) {
      if (tokens[r * T + t] != data::kPadId) {
        length[r] = t + 1;
        break;
      }
    }
  }
  std::vector<int64_t> order(rows);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return length[a] > length[b]; });
  std::vector<torch::Tensor> parts;
  std::vector<int32_t> pass;
  for (int64_t begin = 0; begin < rows; begin += rows_per_pass) {
    const int64_t end = std::min(rows, begin + rows_per_pass), t = length[order[begin]];  // longest first
    pass.assign((end - begin) * t, data::kPadId);
    for (int64_t i = begin; i < end; ++i) std::copy_n(tokens + order[i] * T, t, pass.begin() + (i - begin) * t);
    parts.push_back(encode(HostToDevice(pass.data(), {end - begin, t}, torch::kInt32, device, torch::kLong)));
  }
  if (parts.empty()) return encode(torch::zeros({0, 1}, torch::TensorOptions(device).dtype(torch::kLong)));
  std::vector<int64_t> inverse(rows);
  for (int64_t i = 0; i < rows; ++i) inverse[order[i]] = i;
  return torch::cat(parts).index_select(0, HostToDevice(inverse.data(), {rows}, torch::kLong, device, torch::kLong));
}

PackedLayout PackedLayout::FromIndex(const torch::Tensor& index, int64_t B, int64_t T) {
  PackedLayout layout;
  layout.index = index;
  layout.key_mask =
      torch::zeros({B * T}, index.options().dtype(torch::kBool)).index_fill_(0, index, true).view({B, T});
  const torch::Tensor lengths = layout.key_mask.sum(1);  // (B,) int64
  layout.cumulative = torch::cat({torch::zeros({1}, lengths.options()), lengths.cumsum(0)}).to(torch::kInt32);
  if (!index.is_cpu()) return layout;
  // On the host, where reading the lengths waits for no device: sequences
  // sorted by length (stable), their rows in that order, and the runs of
  // equal length.
  const torch::Tensor host = lengths.to(torch::kCPU).contiguous();
  const int64_t* length = host.data_ptr<int64_t>();
  std::vector<int64_t> start(B + 1, 0), order(B);
  for (int64_t b = 0; b < B; ++b) start[b + 1] = start[b] + length[b];
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return length[a] < length[b]; });
  std::vector<int64_t> rows;
  rows.reserve(start[B]);
  for (const int64_t b : order) {
    for (int64_t row = start[b]; row < start[b + 1]; ++row) rows.push_back(row);
    if (layout.runs.empty() || layout.runs.back().first != length[b]) layout.runs.emplace_back(length[b], 0);
    ++layout.runs.back().second;
  }
  std::vector<int64_t> inverse(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) inverse[rows[i]] = static_cast<int64_t>(i);
  const auto on_device = [&](const std::vector<int64_t>& v) {
    return HostToDevice(v.data(), {static_cast<int64_t>(v.size())}, torch::kLong, index.device(), torch::kLong);
  };
  layout.by_length = on_device(rows);
  layout.from_length = on_device(inverse);
  return layout;
}

torch::Tensor PackedLayout::Unpack(const torch::Tensor& packed) const {
  std::vector<int64_t> shape = {key_mask.numel()};
  for (int64_t d = 1; d < packed.dim(); ++d) shape.push_back(packed.size(d));
  std::vector<int64_t> unpacked = key_mask.sizes().vec();
  unpacked.insert(unpacked.end(), shape.begin() + 1, shape.end());
  return torch::zeros(shape, packed.options()).index_copy(0, index, packed).view(unpacked);
}

MultiHeadAttentionImpl::MultiHeadAttentionImpl(int64_t hidden, int64_t heads, double dropout)
    : heads_(heads), dropout_(dropout) {
  TORCH_CHECK(hidden % heads == 0, "hidden size ", hidden, " is not a multiple of the ", heads, " heads");
  query_ = register_module("query", torch::nn::Linear(hidden, hidden));
  key_ = register_module("key", torch::nn::Linear(hidden, hidden));
  value_ = register_module("value", torch::nn::Linear(hidden, hidden));
  output_ = register_module("output", torch::nn::Linear(hidden, hidden));
}

torch::Tensor MultiHeadAttentionImpl::ProjectQueryKeyValue(const torch::Tensor& x) {
  // One (C -> 3C) product instead of three (C -> C): the weights stay three
  // modules, so checkpoints and imports keep BERT's layout.
  return torch::linear(x, torch::cat({query_->weight, key_->weight, value_->weight}),
                       torch::cat({query_->bias, key_->bias, value_->bias}));
}

torch::Tensor MultiHeadAttentionImpl::Attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                             const torch::Tensor& key_mask) {
  const int64_t B = q.size(0), T = q.size(2), D = q.size(3);
  const torch::Tensor mask = key_mask.defined() ? key_mask.view({B, 1, 1, T}) : key_mask;  // over heads and queries
  const double p = is_training() ? dropout_ : 0.0;
  if (kernel == AttentionKernel::kFused) {
    return key_mask.defined() ? at::scaled_dot_product_attention(q, k, v, mask, p)
                              : at::scaled_dot_product_attention(q, k, v, std::nullopt, p);
  }
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(D));
  if (key_mask.defined()) scores = scores.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::dropout(torch::softmax(scores, -1), p, is_training()), v);
}

torch::Tensor MultiHeadAttentionImpl::AttendUnpadded(const torch::Tensor& qkv, const PackedLayout& layout) {
  const int64_t N = qkv.size(0), C = qkv.size(1) / 3, D = C / heads_;
  const double p = is_training() ? dropout_ : 0.0;
  if (qkv.is_cuda()) {
    // Every sequence's length is at most T and at most N; the memory-
    // efficient backward refuses a bound above N (its key's length).
    const int64_t longest = std::min(layout.key_mask.size(1), N);
    const std::vector<torch::Tensor> q_k_v = qkv.view({N, 3, heads_, D}).unbind(1);  // (N, H, D) each
    const bool half = qkv.scalar_type() == torch::kHalf || qkv.scalar_type() == torch::kBFloat16;
    torch::Tensor context;  // (N, H, D)
    if (half) {
      context = std::get<0>(at::_flash_attention_forward(q_k_v[0], q_k_v[1], q_k_v[2], layout.cumulative,
                                                         layout.cumulative, longest, longest, p,
                                                         /*is_causal=*/false,
                                                         /*return_debug_mask=*/false));
    } else {
      DOCMATCH_CHECK(p == 0, "model", "fp32 attention with dropout goes through the padded grid (ForwardPacked)");
      // (1, N, H, D): one batch of packed sequences, cut by the cumulative lengths
      const bool backward = torch::GradMode::is_enabled() && qkv.requires_grad();
      context = std::get<0>(at::_efficient_attention_forward(
                                q_k_v[0].unsqueeze(0), q_k_v[1].unsqueeze(0), q_k_v[2].unsqueeze(0), std::nullopt,
                                layout.cumulative, layout.cumulative, longest, longest, p, /*custom_mask_type=*/0,
                                backward))
                    .squeeze(0);
    }
    return context.reshape({N, C});
  }
  DOCMATCH_CHECK(layout.by_length.defined(), "model", "a packed layout made on ", layout.index.device(),
                 " used on ", qkv.device());
  // One dense pass per sequence length, no mask: each run's sequences are
  // consecutive in by_length's order.
  const torch::Tensor grouped = qkv.index_select(0, layout.by_length);
  std::vector<torch::Tensor> contexts;
  int64_t at = 0;
  for (const auto& [length, sequences] : layout.runs) {
    const std::vector<torch::Tensor> q_k_v = grouped.narrow(0, at, sequences * length)
                                                 .view({sequences, length, 3, heads_, D})
                                                 .permute({2, 0, 3, 1, 4})
                                                 .unbind(0);  // (sequences, H, length, D) each
    const torch::Tensor context = Attend(q_k_v[0], q_k_v[1], q_k_v[2], torch::Tensor());
    contexts.push_back(context.transpose(1, 2).reshape({sequences * length, C}));
    at += sequences * length;
  }
  return torch::cat(contexts).index_select(0, layout.from_length);
}

torch::Tensor MultiHeadAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& key_mask) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / heads_;
  // unbind, not three selects: its backward writes one (3, B, H, T, D) gradient
  const std::vector<torch::Tensor> qkv =
      ProjectQueryKeyValue(x).view({B, T, 3, heads_, D}).permute({2, 0, 3, 1, 4}).unbind(0);
  const torch::Tensor context = Attend(qkv[0], qkv[1], qkv[2], key_mask);  // (B, H, T, D)
  return output_(context.transpose(1, 2).reshape({B, T, C}));
}

torch::Tensor MultiHeadAttentionImpl::ForwardPacked(const torch::Tensor& x, const PackedLayout& layout) {
  const int64_t B = layout.key_mask.size(0), T = layout.key_mask.size(1), C = x.size(1), D = C / heads_;
  const torch::Tensor qkv = ProjectQueryKeyValue(x);  // (N, 3C), in autocast's dtype under autocast
  // CUDA's variable-length kernels take head sizes that are multiples of 8 up
  // to 256; other heads, the plain kernel and other devices attend in the
  // padded grid, as does an empty batch. So does fp32 with dropout: PyTorch's variable-length
  // memory-efficient kernel offsets its dropout draws by one key length in
  // the forward and by another in the backward, so the two masks differ.
  const bool dropout = is_training() && dropout_ > 0;
  const bool varlen = qkv.is_cuda() && kernel == AttentionKernel::kFused && D % 8 == 0 && D <= 256 && B > 0 &&
                      (qkv.scalar_type() != torch::kFloat || !dropout);
  if ((packed == PackedAttention::kAuto && varlen) ||
      (packed == PackedAttention::kUnpadded && (varlen || qkv.is_cpu()))) {
    return output_(AttendUnpadded(qkv, layout));
  }
  // Only attention needs the (B, T) layout: scatter the real rows' q, k, v
  // into it (zeros at padding, which the key mask hides) and gather back.
  const std::vector<torch::Tensor> q_k_v =
      layout.Unpack(qkv).view({B, T, 3, heads_, D}).permute({2, 0, 3, 1, 4}).unbind(0);
  const torch::Tensor context = Attend(q_k_v[0], q_k_v[1], q_k_v[2], layout.key_mask);        // (B, H, T, D)
  return output_(context.transpose(1, 2).reshape({B * T, C}).index_select(0, layout.index));  // (N, C)
}

TransformerLayerImpl::TransformerLayerImpl(const TransformerConfig& c) {
  attention = register_module("attention", MultiHeadAttention(c.hidden, c.heads, c.dropout));
  attention_norm_ = register_module(
      "attention_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden}).eps(c.layer_norm_eps)));
  intermediate_ = register_module("intermediate", torch::nn::Linear(c.hidden, c.intermediate));
  output_ = register_module("output", torch::nn::Linear(c.intermediate, c.hidden));
  output_norm_ = register_module("output_norm",
                                 torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden}).eps(c.layer_norm_eps)));
  dropout_ = register_module("dropout", torch::nn::Dropout(c.dropout));
}

torch::Tensor TransformerLayerImpl::FeedForward(const torch::Tensor& attended) {
  const torch::Tensor hidden = torch::gelu(intermediate_(attended));
  return output_norm_(attended + dropout_(output_(hidden)));
}

torch::Tensor TransformerLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& key_mask) {
  return FeedForward(attention_norm_(x + dropout_(attention(x, key_mask))));
}

torch::Tensor TransformerLayerImpl::ForwardPacked(const torch::Tensor& x, const PackedLayout& layout) {
  return FeedForward(attention_norm_(x + dropout_(attention->ForwardPacked(x, layout))));
}

TransformerEncoderImpl::TransformerEncoderImpl(const TransformerConfig& config) {
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t l = 0; l < config.layers; ++l) layers_->push_back(TransformerLayer(config));
}

torch::Tensor TransformerEncoderImpl::forward(torch::Tensor x, const torch::Tensor& key_mask) {
  for (const auto& layer : *layers_) x = layer->as<TransformerLayer>()->forward(x, key_mask);
  return x;
}

torch::Tensor TransformerEncoderImpl::ForwardPacked(torch::Tensor x, const PackedLayout& layout) {
  for (const auto& layer : *layers_) x = layer->as<TransformerLayer>()->ForwardPacked(x, layout);
  return x;
}

void TransformerEncoderImpl::set_kernel(AttentionKernel kernel) {
  for (const auto& layer : *layers_) layer->as<TransformerLayer>()->attention->kernel = kernel;
}

EmbeddingsImpl::EmbeddingsImpl(int64_t vocab_size, int64_t max_positions, const TransformerConfig& c) {
  tokens = register_module("tokens", torch::nn::Embedding(vocab_size, c.hidden));
  positions_ = register_module("positions", torch::nn::Embedding(max_positions, c.hidden));
  norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden}).eps(c.layer_norm_eps)));
  dropout_ = register_module("dropout", torch::nn::Dropout(c.dropout));
}

torch::Tensor EmbeddingsImpl::forward(const torch::Tensor& ids) {
  const torch::Tensor position = torch::arange(ids.size(1), ids.options().dtype(torch::kLong));
  return dropout_(norm_(tokens(ids) + positions_(position).unsqueeze(0)));
}

torch::Tensor EmbeddingsImpl::ForwardPacked(const torch::Tensor& ids, const torch::Tensor& positions) {
  return dropout_(norm_(tokens(ids) + positions_(positions)));
}

PackedAttention ParsePackedAttention(const std::string& name) {
  if (name == "auto") return PackedAttention::kAuto;
  if (name == "unpadded") return PackedAttention::kUnpadded;
  DOCMATCH_CHECK(name == "padded", "model", "unknown attention layout '", name, "' (auto, unpadded, padded)");
  return PackedAttention::kPadded;
}

void UsePackedAttention(torch::nn::Module& model, PackedAttention how) {
  for (const auto& module : model.modules(/*include_self=*/true)) {
    if (auto* attention = module->as<MultiHeadAttentionImpl>()) attention->packed = how;
  }
}

void InitializeBertStyle(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    const bool is_norm = name.find("norm") != std::string::npos;
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
      p.zero_();
    } else if (is_norm) {
      p.fill_(1.0);
    } else {
      p.normal_(0.0, 0.02);
    }
  }
}

}  // namespace docmatch::model
