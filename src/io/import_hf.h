// `docmatch import-hf`: a Hugging Face BERT-family model folder
// (config.json, model.safetensors, vocab.txt, tokenizer_config.json, and for
// sentence-transformers models sentence_bert_config.json and
// 1_Pooling/config.json) becomes a docmatch model folder
// (io/model_folder.h) that `finetune --init`, `embed` and `eval` read,
// with the vocabulary as a WordPiece tokenizer.model for `prepare
// --tokenizer`.
//
// The BERT encoder goes exactly onto docmatch's transformer
// (model/transformer.h), which is BERT's own layer:
//   word_embeddings           -> embeddings.tokens        rows permuted (below)
//   position_embeddings[:N]   -> embeddings.positions     + token_type_embeddings[0]
//                                                         (docmatch inputs are all
//                                                         segment 0, so the sum is
//                                                         what BERT adds)
//   embeddings.LayerNorm      -> embeddings.norm
//   layer.i.attention.self.{query,key,value}  -> layers.i.attention.{query,key,value}
//   layer.i.attention.output.dense / .LayerNorm -> layers.i.attention.output / attention_norm
//   layer.i.intermediate.dense -> layers.i.intermediate
//   layer.i.output.dense / .LayerNorm -> layers.i.output / output_norm
// into MatchBERT's `encoder` or SMITH's `sentence_encoder`; a bag of
// embeddings (--kind bag, model/bag.h) takes the word embeddings alone. What BERT has and
// docmatch does not use (the pooler, MLM and NSP heads) is listed as dropped;
// what docmatch has and BERT does not (SMITH's block and document layers,
// MatchBERT's dense head) keeps its seeded BERT-style initialisation and is
// listed as fresh. Anything that cannot be mapped exactly is refused naming
// the key: another model_type, a GELU other than erf, relative positions,
// a decoder, a LayerNorm epsilon other than 1e-12, more positions than the
// checkpoint has.
//
// Ids: docmatch reserves 0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], 4 [MASK]
// (data/text/tokenizer.h); BERT vocabularies put them elsewhere (uncased BERT: 0,
// 100-103). Each special token is swapped into its docmatch id, the token it
// displaces takes its place, and the embedding rows move the same way, so
// the model reads the same vectors for the same text.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace docmatch::io {

struct ImportOptions {
  std::string input;                // Hugging Face model folder
  std::string output;               // docmatch model folder to write
  std::string kind = "match_bert";  // match_bert | smith | sdr | bag (ImportKinds())
  std::string lowercase = "auto";   // auto (tokenizer_config.json) | true | false
  uint64_t seed = 0;                // for the layers BERT does not have
  // match_bert, sdr, bag
  int64_t max_tokens = 0;        // 0: match_bert: sentence_bert_config's max_seq_length, else 512; sdr: 128; bag: 4096
  std::string pooling = "auto";  // auto (1_Pooling: mean or cls) | cls | mean; smith: of each block
  int64_t chunks = 1;
  std::string window_pooling = "mean";  // mean | max | attention | maxsim (match_bert.h)
  // smith
  int64_t block_length = 128;
  int64_t max_blocks = 4;
  int64_t document_layers = 3;
  // residual: the document vector starts as the block vectors' mean (smith.h)
  std::string combine = "residual";
  double dropout = 0.1;
  bool overwrite = false;
};

struct ImportReport {
  nlohmann::json source;  // the checkpoint's config.json
  nlohmann::json model;   // the docmatch model config written
  int64_t mapped_tensors = 0, mapped_parameters = 0;
  std::vector<std::string> dropped;                    // checkpoint tensors docmatch does not use
  std::vector<std::string> fresh;                      // docmatch parameters not in the checkpoint
  std::vector<std::pair<int64_t, int64_t>> moved_ids;  // (bert id, docmatch id), ids that moved
  nlohmann::json ToJson() const;
};

ImportReport ImportHuggingFace(const ImportOptions& options);

// The folder a Hugging Face model `given` names: the folder itself; a hub
// cache's repository folder (models--org--name) as the snapshot its
// refs/main names (or its only snapshot); or a hub id (org/name) found in
// the local hub cache (where huggingface_hub looks: $HF_HUB_CACHE,
// $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub,
// ~/.cache/huggingface/hub). When that is not `given` itself, `said` gets
// one line for the user. docmatch downloads nothing: a hub id not in the
// cache is an Error saying how to fetch it.
std::string ResolveHuggingFaceFolder(const std::string& given, std::string* said);

// The kinds --kind takes, in the order --help lists them.
std::vector<std::string> ImportKinds();

}  // namespace docmatch::io
