// A model folder: what `embed`, `eval`, `export` and `finetune --init` read.
// Every checkpoint step-<N>/ is one, and so is an exported model:
//
//   config.json   {"format": "docmatch-model", "version": 1,
//                  "model": {"kind": ..., every key of that kind},
//                  "weights": "model.pt" | "model.safetensors",
//                  "prefix": "encoder." where the weights hold more than the
//                            encoder (a pre-training checkpoint's heads),
//                  "stage": "pretrain" | "finetune" | "export",
//                  "tokenizer_hash": the corpus tokenizer it was trained with,
//                  "tokenizer": "tokenizer.model" | "tokenizer.wordpiece", a copy
//                               of the corpus's (every folder docmatch writes;
//                               checkpoints of older versions carry none),
//                  "layout": "docmatch" | "bert" (weights under BertModel's names,
//                            io/bert_layout.h; a [CLS] dense layer in 2_Dense/:
//                            `export --format hf`)}
//   model.pt | model.safetensors
//
// Loading checks the tokenizer against the corpus a stage reads, so vectors
// are never computed from another vocabulary's ids.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "data/corpus/corpus.h"
#include "data/text/tokenizer.h"
#include "model/document_model.h"

namespace docmatch::io {

constexpr const char* kModelConfigFile = "config.json";

// The layout of a SMITH `export --format hf`: its sentence encoder alone,
// for sentence-transformers; docmatch does not read it as a model.
constexpr const char* kSentenceEncoderLayout = "bert_sentence_encoder";

struct ModelFolderInfo {
  model::ModelConfig config;
  std::string weights = "model.pt";
  std::string prefix;  // "" or "encoder."
  std::string stage;
  std::string tokenizer_hash;
  std::string tokenizer;  // file in the folder ("" in checkpoints of older versions)
  // Not in config.json: the bytes of `tokenizer` that WriteTrainedModelFolder
  // writes beside the weights (the training corpus's tokenizer file, read
  // once when the stage starts: TrainedTokenizer).
  std::string tokenizer_bytes;
  std::string layout = "docmatch";  // docmatch | bert | bert_sentence_encoder
};

// config.json's content for `info`; WriteModelFolderInfo writes it.
nlohmann::json ModelFolderInfoJson(const ModelFolderInfo& info);
void WriteModelFolderInfo(const std::string& folder, const ModelFolderInfo& info);
// A training stage's model folder (checkpoint step-<N>/ or <run>/best/):
// model.pt from `module`, info.tokenizer_bytes as info.tokenizer, and
// config.json, so that the folder exports, encodes and searches text on its
// own.
void WriteTrainedModelFolder(const std::string& folder, const torch::nn::Module& module, const ModelFolderInfo& info);
// Sets `info`'s tokenizer (file name and bytes) to `corpus`'s, read now, so
// that every checkpoint of the run carries the tokenizer it was trained with
// even if the corpus folder changes or goes while it trains.
void TrainedTokenizer(const data::Corpus& corpus, ModelFolderInfo* info);
// Throws naming the folder when config.json is missing or malformed.
ModelFolderInfo ReadModelFolderInfo(const std::string& folder);

// The model of a folder with its weights loaded (on the CPU).
std::unique_ptr<model::DocumentModel> LoadModelFolder(const std::string& folder, ModelFolderInfo* info = nullptr);

// Loads the folder's weights into `module`, checking every name and shape.
void LoadFolderWeights(torch::nn::Module& module, const std::string& folder, const ModelFolderInfo& info);

// Throws when the folder's model was trained with another tokenizer than the
// corpus's.
void CheckTokenizer(const ModelFolderInfo& info, const data::Corpus& corpus, const std::string& folder);

// The tokenizer file `path` stands for: the file itself, a corpus folder's
// tokenizer, or the tokenizer an import or export carries. Throws naming the
// folder when it has none (a training checkpoint: give its corpus).
std::string TokenizerFileOf(const std::string& path);

// The tokenizer that turns raw text into this model's ids, for `encode` and
// `search --text`: `given` (a tokenizer file, a corpus folder or a model
// folder whose tokenizer to use: TokenizerFileOf) when not empty, else the folder's own (imports and
// exports carry one). Throws when there is none, or when its hash is not the
// one the model was trained with, naming both.
data::Tokenizer LoadModelTokenizer(const std::string& folder, const ModelFolderInfo& info, const std::string& given);

}  // namespace docmatch::io
