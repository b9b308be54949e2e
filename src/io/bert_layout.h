// Hugging Face BERT's tensor names <-> docmatch's transformer names, one table
// for both directions: `import-hf` reads a BERT checkpoint into a docmatch
// model, `export --format hf` writes a flat encoder as BERT, and a model
// folder saved in BERT's layout (io/model_folder.h, "layout": "bert") is read
// back through the same table.
//
//   embeddings.word_embeddings       <-> embeddings.tokens
//   embeddings.position_embeddings   <-> embeddings.positions (+ token_type_embeddings[0]
//                                        on the way in: docmatch inputs are all segment 0)
//   embeddings.LayerNorm             <-> embeddings.norm
//   encoder.layer.i.attention.self.{query,key,value} <-> <encoder>.layers.i.attention.{query,key,value}
//   encoder.layer.i.attention.output.dense / .LayerNorm <-> ...attention.output / attention_norm
//   encoder.layer.i.intermediate.dense <-> ...intermediate
//   encoder.layer.i.output.dense / .LayerNorm <-> ...output / output_norm
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace docmatch::io {

// The docmatch name of a BERT tensor (no "bert." prefix; LayerNorm's
// gamma/beta may be spelled either way) when the encoder's parameters live
// under `encoder` ("encoder" for MatchBERT, "sentence_encoder" for SMITH);
// "" for what is not part of the encoder (the pooler, heads) and for the
// position and token type embeddings, which need the sum above.
std::string DocmatchName(std::string bert_name, const std::string& encoder);

// The BERT name of a docmatch encoder tensor (the inverse of DocmatchName,
// positions included); "" for what BERT has no place for.
std::string BertName(const std::string& docmatch_name, const std::string& encoder);

// A BertModel state dict (no prefix) -> the docmatch tensors it maps onto:
// the first `positions` position rows summed with token type 0. Throws naming
// `origin` when it lacks the position embeddings; `dropped` (optional) gets
// the names it cannot map.
std::map<std::string, torch::Tensor> BertToDocmatch(const std::map<std::string, torch::Tensor>& bert,
                                                    const std::string& encoder, int64_t positions,
                                                    const std::string& origin,
                                                    std::vector<std::string>* dropped = nullptr);

}  // namespace docmatch::io
