// Transformer building blocks shared by every encoder: multi-head attention
// (fused through scaled_dot_product_attention, with the plain softmax
// formulation kept as the reference tests compare against), the post-LN BERT
// layer, a stack of layers, and token + position embeddings.
//
// Padding is a key mask: (B, T) bool, true = a real token. Queries at padded
// positions still compute (their rows are ignored downstream); every real
// sequence has at least one real key, so no softmax row is empty.
#pragma once

#include <torch/torch.h>

namespace docmatch::model {

enum class AttentionKernel {
  kFused,  // at::scaled_dot_product_attention (flash / memory-efficient / math)
  kPlain,  // softmax(QK^T / sqrt(d) + mask) V, written out: the test reference
};

struct TransformerConfig {
  int64_t hidden = 256;         // C
  int64_t heads = 4;            // H; C % H == 0
  int64_t intermediate = 1024;  // feed-forward width (4C in BERT)
  int64_t layers = 6;           // L
  double dropout = 0.1;         // on attention probabilities and residual branches
  double layer_norm_eps = 1e-12;
};

class MultiHeadAttentionImpl : public torch::nn::Module {
 public:
  MultiHeadAttentionImpl(int64_t hidden, int64_t heads, double dropout);
  // x (B, T, C), key_mask (B, T) bool -> (B, T, C)
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_mask);

  AttentionKernel kernel = AttentionKernel::kFused;

 private:
  int64_t heads_;
  double dropout_;
  torch::nn::Linear query_{nullptr}, key_{nullptr}, value_{nullptr}, output_{nullptr};
};
TORCH_MODULE(MultiHeadAttention);

// BERT's post-LN layer: x = LN(x + Attn(x)); x = LN(x + FFN(x)), GELU (erf).
class TransformerLayerImpl : public torch::nn::Module {
 public:
  explicit TransformerLayerImpl(const TransformerConfig& config);
  // x (B, T, C), key_mask (B, T) -> (B, T, C)
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_mask);
  MultiHeadAttention attention{nullptr};

 private:
  torch::nn::LayerNorm attention_norm_{nullptr}, output_norm_{nullptr};
  torch::nn::Linear intermediate_{nullptr}, output_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(TransformerLayer);

class TransformerEncoderImpl : public torch::nn::Module {
 public:
  explicit TransformerEncoderImpl(const TransformerConfig& config);
  // x (B, T, C), key_mask (B, T) -> (B, T, C)
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& key_mask);
  void set_kernel(AttentionKernel kernel);

 private:
  torch::nn::ModuleList layers_{nullptr};
};
TORCH_MODULE(TransformerEncoder);

// Token embedding + learned absolute positions, then LayerNorm and dropout.
class EmbeddingsImpl : public torch::nn::Module {
 public:
  EmbeddingsImpl(int64_t vocab_size, int64_t max_positions, const TransformerConfig& config);
  // ids (B, T) int64 -> (B, T, C)
  torch::Tensor forward(const torch::Tensor& ids);
  torch::nn::Embedding tokens{nullptr};  // (V, C); language-model heads tie to it

 private:
  torch::nn::Embedding positions_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(Embeddings);

// BERT's initialisation: N(0, 0.02) weights, zero biases, unit LayerNorms.
void InitializeBertStyle(torch::nn::Module& module);

}  // namespace docmatch::model
