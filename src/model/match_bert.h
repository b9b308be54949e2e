// MatchBERT, SMITH's flat baseline (Yang et al. 2020, §5.2): one transformer
// over the first N tokens; the [CLS] output -> dense -> L2 norm is the
// document vector, trained with the same Siamese loss (losses.h).
#pragma once

#include <torch/torch.h>

#include "data/flat_batch.h"
#include "model/transformer.h"

namespace docmatch::model {

struct MatchBertConfig {
  int64_t vocab_size = 16000;   // V
  int64_t hidden = 256;         // C
  int64_t heads = 4;            // H
  int64_t intermediate = 1024;  // feed-forward width
  int64_t layers = 6;           // L
  int64_t max_tokens = 256;     // N, [CLS] included (paper: 256)
  double dropout = 0.1;
  double amplifier = 6.0;

  TransformerConfig Transformer() const { return {hidden, heads, intermediate, layers, dropout}; }
};

// tokens (B, T) int64 on `device`.
torch::Tensor ToTensor(const data::FlatBatch& batch, const torch::Device& device);

class FlatEncoderImpl : public torch::nn::Module {
 public:
  explicit FlatEncoderImpl(const MatchBertConfig& config);
  // tokens (B, T) -> unit document vectors (B, C)
  torch::Tensor forward(const torch::Tensor& tokens);
  // tokens (B, T) -> token states (B, T, C)
  torch::Tensor Encode(const torch::Tensor& tokens);
  void set_kernel(AttentionKernel kernel) { encoder_->set_kernel(kernel); }
  const MatchBertConfig& config() const { return config_; }

  Embeddings embeddings{nullptr};

 private:
  MatchBertConfig config_;
  TransformerEncoder encoder_{nullptr};
  torch::nn::Linear dense_{nullptr};
};
TORCH_MODULE(FlatEncoder);

}  // namespace docmatch::model
