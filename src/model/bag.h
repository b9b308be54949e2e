// A bag of embeddings: a document's vector is the mean of the token
// embeddings of its first max_tokens tokens, L2-normalised. Word order is
// not read at all. It is the baseline DocSplit's paper (Ginzburg et al.,
// §5) and SMITH's (§5.2, "averaged word embeddings") compare long-document
// encoders against: what any encoder must beat to show that it reads more
// than which words occur. `import-hf --kind bag` takes a BERT checkpoint's
// word embeddings (MiniLM's, for instance) and nothing else; fine-tuning
// moves the embeddings themselves.
//
//   tokens of B documents, flat (R,) with offsets (B,)
//     -> token embedding (R, C) -> mean per document (B, C) -> L2 norm
//   pair logit = amplifier * cosine (as SMITH's)
//
// It is also the smallest kind, and the example of adding one through the
// kind registry (model/kinds.h): this file pair, its config in ModelConfig,
// its line in ModelKinds().
#pragma once

#include <torch/torch.h>

#include <vector>

#include "data/corpus/document.h"

namespace docmatch::model {

struct ModelKind;

struct BagConfig {
  int64_t vocab_size = 16000;  // V, from the corpus's tokenizer
  int64_t hidden = 256;        // C: the embedding's width, the vector's size
  int64_t max_tokens = 4096;   // N: a document's first N tokens are averaged
  double amplifier = 6.0;      // fine-tuning: logit = amplifier * cosine
};

// The documents' first tokens in one flat run, with where each starts.
struct BagBatch {
  std::vector<int64_t> tokens;   // (R,) the documents' first max_tokens tokens in a run
  std::vector<int64_t> offsets;  // (B,) where each document's tokens start in `tokens`
};
BagBatch BuildBagBatch(const std::vector<const data::Document*>& documents, const BagConfig& config);

class BagEncoderImpl : public torch::nn::Module {
 public:
  explicit BagEncoderImpl(const BagConfig& config);
  // A batch -> unit document vectors (B, C), on `device`.
  torch::Tensor forward(const BagBatch& batch, const torch::Device& device);

  // (V, C), registered as embeddings.tokens: the name MatchBERT's and SMITH's
  // token embeddings have, so import-hf maps BERT's word embeddings alike.
  torch::nn::Embedding tokens{nullptr};
};
TORCH_MODULE(BagEncoder);

// Its row of the kind registry.
const ModelKind& BagKind();

}  // namespace docmatch::model
