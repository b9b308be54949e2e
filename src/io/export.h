// `docmatch export`: a self-contained model folder for serving and for other
// tools, written under <output>.tmp and renamed when complete.
//
// Format "docmatch" (every model kind):
//   model.safetensors  the encoder's parameters and buffers, float32, by docmatch name
//   config.json        the model folder description (io/model_folder.h)
//                      with "stage": "export" and "tokenizer"
//   tokenizer.model | tokenizer.wordpiece   the tokenizer the encoder's ids come from
// `embed --model <output>` reads it; scripts/reference_vector.py recomputes a
// document vector from it with numpy.
//
// Format "hf" (a transformer encoder with a WordPiece vocabulary: what
// import-hf brings in and what is trained from it): the same folder is also a
// Hugging Face BERT model and a sentence-transformers model. MatchBERT: its
// encoder and pooling; SDR: its sentence encoder, mean-pooled (a text read as
// one sentence; the word-LM head stays behind); SMITH (asked for, never
// "auto"): its sentence encoder, [CLS] then block_dense with ReLU in 2_Dense/
// (block_pooling mean: mean-pooled, no 2_Dense/)
// (a text read as one block gives its block vector; layout
// "bert_sentence_encoder", which docmatch does not load as a model):
//   config.json        BERT's keys (model_type "bert", sizes, erf GELU) next to
//                      docmatch's description, with "layout": "bert"
//   model.safetensors  BertModel's tensor names (io/bert_layout.h), token type
//                      embeddings zero
//   vocab.txt, tokenizer_config.json, special_tokens_map.json  BertTokenizer's files
//   modules.json, sentence_bert_config.json, 1_Pooling/ (mean or [CLS]),
//   2_Dense/ ([CLS] pooling's dense layer; SMITH's block_dense + ReLU), then Normalize
// so that AutoModel, AutoTokenizer and SentenceTransformer(<output>) load it
// and give docmatch's vectors for texts within one window (max_tokens); a
// model that averages several windows (chunks > 1) gives the first window's
// vector there, which the export says. `embed --model <output>` reads it too.
// "auto" picks hf for MatchBERT and SDR where it applies and docmatch elsewhere.
#pragma once

#include <string>

namespace docmatch::io {

struct ExportOptions {
  std::string model;   // model folder (a checkpoint, <run>/best, an import or an export)
  std::string corpus;  // the corpus whose tokenizer the model was trained with; may be empty
                       // when the model folder carries its tokenizer
  std::string output;
  std::string format = "auto";  // auto | docmatch | hf
  bool overwrite = false;
};

// Returns the format written.
std::string ExportModel(const ExportOptions& options);

}  // namespace docmatch::io
