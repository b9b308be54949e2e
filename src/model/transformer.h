// Transformer building blocks shared by every encoder: multi-head attention
// (fused through scaled_dot_product_attention, with the plain softmax
// formulation kept as the reference tests compare against), the post-LN BERT
// layer, a stack of layers, and token + position embeddings.
//
// Padding is a key mask: (B, T) bool, true = a real token. Queries at padded
// positions still compute (their rows are ignored downstream); every real
// sequence has at least one real key, so no softmax row is empty.
//
// The packed path (ForwardPacked) computes real tokens only: activations are
// (N, C) rows of the real tokens. Every layer but attention works per token;
// attention mixes positions, and attends either
//   - without padding (AttendUnpadded): each sequence's real rows where they
//     are, on CUDA in one variable-length kernel over the sequences'
//     cumulative lengths (flash attention for half types, the memory-
//     efficient one for fp32 without dropout), on the CPU a pass a length;
//   - or in the padded grid: q, k, v scattered into (B, T), attended under
//     the key mask, gathered back.
// PackedAttention::kAuto takes the first on CUDA, where it saves two copies
// and the padding's share of attention per layer (83-86% of SMITH's
// sentence-block positions are real on Wikispeedia), and the grid on the
// CPU, where attention is 2% of a layer's FLOPs and a pass per length costs
// more than the padding (bench/NOTES.md). Without a graph, rows of like
// length go through together in bounded passes (EncodeRowsWithoutGraph).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace docmatch::model {

// Rows of token ids, padded at their ends (rows x T, int32 on the host),
// through `encode` (ids (B, T') on `device` -> (B, C)) without a graph, in
// passes of at most rows_per_pass rows: rows of like length go together, and
// each pass is cut to its longest row, so memory is bounded by one pass and
// little is paid for padding (padding changes no row's vector). The result
// (rows, C) is in the rows' order.
torch::Tensor EncodeRowsWithoutGraph(const int32_t* tokens, int64_t rows, int64_t T, const torch::Device& device,
                                     int64_t rows_per_pass,
                                     const std::function<torch::Tensor(const torch::Tensor&)>& encode);

// How the packed path attends (above); --attention auto|unpadded|padded.
enum class PackedAttention { kAuto, kUnpadded, kPadded };
PackedAttention ParsePackedAttention(const std::string& name);  // auto, unpadded, padded

enum class AttentionKernel {
  kFused,  // at::scaled_dot_product_attention (flash / memory-efficient / math)
  kPlain,  // softmax(QK^T / sqrt(d) + mask) V, written out: the test reference
};

// Where the N real tokens of a (B, T) padded batch sit. Every sequence has
// at least one real token.
struct PackedLayout {
  torch::Tensor key_mask;  // (B, T) bool, true = a real token
  torch::Tensor index;     // (N,) int64 flat positions in B*T of the real tokens, ascending
  // For attention without padding, made by FromIndex: the sequences' packed
  // rows begin at cumulative[b] and end before cumulative[b + 1] ((B + 1,)
  // int32 on the device, as variable-length kernels take them; no host
  // read). On the host, the rows grouped by their sequence's length: `by_length`
  // (N,) int64 lists the rows of the sequences of each length together
  // (runs: (length, sequences) in that order), `from_length` undoes it.
  torch::Tensor cumulative;
  torch::Tensor by_length, from_length;
  std::vector<std::pair<int64_t, int64_t>> runs;

  // index (N,) made by the caller, e.g. on the host from a batch's host
  // arrays (smith.h BlockLayout): a nonzero() of a device mask would read
  // the mask back, a host sync on a GPU.
  static PackedLayout FromIndex(const torch::Tensor& index, int64_t B, int64_t T);
  // packed (N, ...) -> (B, T, ...), zeros at padding
  torch::Tensor Unpack(const torch::Tensor& packed) const;
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
  // x (N, C) real tokens -> (N, C)
  torch::Tensor ForwardPacked(const torch::Tensor& x, const PackedLayout& layout);

  AttentionKernel kernel = AttentionKernel::kFused;
  PackedAttention packed = PackedAttention::kAuto;

 private:
  // q, k, v (B, H, T, D), key_mask (B, T) or undefined (all real) -> context (B, H, T, D)
  torch::Tensor Attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const torch::Tensor& key_mask);
  // qkv (N, 3C) packed rows -> context (N, C), each sequence's rows attending
  // among themselves (the header's comment)
  torch::Tensor AttendUnpadded(const torch::Tensor& qkv, const PackedLayout& layout);
  // x (..., C) -> (..., 3C): query, key and value in one matrix product
  torch::Tensor ProjectQueryKeyValue(const torch::Tensor& x);

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
  // x (N, C) real tokens -> (N, C)
  torch::Tensor ForwardPacked(const torch::Tensor& x, const PackedLayout& layout);
  MultiHeadAttention attention{nullptr};

 private:
  // attended (..., C) after the attention block -> the feed-forward block's output (..., C)
  torch::Tensor FeedForward(const torch::Tensor& attended);

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
  // x (N, C) real tokens -> (N, C); the same outputs as forward() at real positions
  torch::Tensor ForwardPacked(torch::Tensor x, const PackedLayout& layout);
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
  // ids (N,) int64 at positions (N,) int64 -> (N, C)
  torch::Tensor ForwardPacked(const torch::Tensor& ids, const torch::Tensor& positions);
  torch::nn::Embedding tokens{nullptr};  // (V, C); language-model heads tie to it

 private:
  torch::nn::Embedding positions_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(Embeddings);

// Every MultiHeadAttention under `model` attends its packed rows so.
void UsePackedAttention(torch::nn::Module& model, PackedAttention how);

// BERT's initialisation: N(0, 0.02) weights, zero biases, unit LayerNorms.
void InitializeBertStyle(torch::nn::Module& module);

}  // namespace docmatch::model
