// Reading and writing a model folder's config.json, building its model and
// loading its weights, and the tokenizer check against a corpus (model_folder.h).
#include "io/model_folder.h"

#include <glog/logging.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "console/error.h"
#include "files/file_writer.h"
#include "io/bert_layout.h"
#include "io/checkpoint.h"
#include "io/checksums.h"
#include "io/safetensors.h"

namespace docmatch::io {
namespace fs = std::filesystem;

nlohmann::json ModelFolderInfoJson(const ModelFolderInfo& info) {
  nlohmann::json json = {{"format", "docmatch-model"},
                         {"version", 1},
                         {"model", model::ModelConfigToJson(info.config)},
                         {"weights", info.weights},
                         {"prefix", info.prefix},
                         {"stage", info.stage},
                         {"tokenizer_hash", info.tokenizer_hash}};
  if (!info.tokenizer.empty()) json["tokenizer"] = info.tokenizer;
  if (info.layout != "docmatch") json["layout"] = info.layout;
  return json;
}

void WriteModelFolderInfo(const std::string& folder, const ModelFolderInfo& info) {
  files::WriteFile(folder + "/" + kModelConfigFile, ModelFolderInfoJson(info).dump(2) + "\n");
}

void TrainedTokenizer(const data::Corpus& corpus, ModelFolderInfo* info) {
  info->tokenizer_hash = corpus.manifest().tokenizer_hash;
  std::ifstream in(corpus.tokenizer_path(), std::ios::binary);
  if (!in) {
    // Training reads token ids, not the tokenizer: go on, and say what the
    // checkpoints will lack.
    LOG(WARNING) << "[ckpt] the corpus's tokenizer '" << corpus.tokenizer_path()
                 << "' is missing: this run's checkpoints carry none (give --corpus or --tokenizer to export, "
                    "encode and search them)";
    info->tokenizer.clear();
    info->tokenizer_bytes.clear();
    return;
  }
  info->tokenizer = corpus.manifest().tokenizer_file;
  info->tokenizer_bytes.assign(std::istreambuf_iterator<char>(in), {});
}

void WriteTrainedModelFolder(const std::string& folder, const torch::nn::Module& module, const ModelFolderInfo& info) {
  SaveModule(module, folder + "/model.pt");
  ModelFolderInfo written = info;
  written.weights = "model.pt";
  written.layout = "docmatch";  // model.pt holds docmatch's names, whatever the stage started from
  if (info.tokenizer_bytes.empty()) written.tokenizer = "";
  if (!written.tokenizer.empty()) files::WriteFile(folder + "/" + written.tokenizer, info.tokenizer_bytes);
  WriteModelFolderInfo(folder, written);
}

ModelFolderInfo ReadModelFolderInfo(const std::string& folder) {
  const std::string path = folder + "/" + kModelConfigFile;
  std::ifstream in(path);
  if (!in) {
    throw Error("model", "'" + folder + "' is not a model folder: no " + kModelConfigFile +
                             " (give a checkpoint step-<N>/, a run's 'latest', or an exported folder)");
  }
  // A Hugging Face or sentence-transformers folder has a config.json too,
  // without docmatch's "format": named as such, before its missing
  // checksums.json could be.
  {
    std::ifstream peek(path);
    const nlohmann::json foreign = nlohmann::json::parse(peek, nullptr, /*allow_exceptions=*/false);
    if (foreign.is_object() && !foreign.contains("format") &&
        (foreign.contains("model_type") || foreign.contains("architectures"))) {
      throw Error("model", "'" + folder + "' is a Hugging Face / sentence-transformers folder (model_type '" +
                               foreign.value("model_type", std::string("?")) +
                               "'), not a docmatch model: import it once with `docmatch import-hf " + folder +
                               " --output models/NAME` (--kind smith reads whole documents), then give models/NAME");
    }
  }
  // config.json decides how the weights are read (kind, sizes, separator):
  // a changed byte must be named like one in the weights.
  VerifyChecksum(folder, kModelConfigFile);
  nlohmann::json json;
  try {
    in >> json;
    if (json.at("format").get<std::string>() != "docmatch-model")
      throw std::runtime_error("format is not docmatch-model");
    ModelFolderInfo info;
    info.config = model::ModelConfigFromJson(json.at("model"), path);
    info.weights = json.at("weights").get<std::string>();
    info.prefix = json.value("prefix", "");
    info.stage = json.value("stage", "");
    info.tokenizer_hash = json.value("tokenizer_hash", "");
    info.tokenizer = json.value("tokenizer", "");
    info.layout = json.value("layout", "docmatch");
    if (info.layout == kSentenceEncoderLayout) {
      throw Error("model", "'" + folder +
                               "' holds SMITH's sentence encoder alone (export --format hf, for sentence-transformers "
                               "and transformers); export the whole model with --format docmatch for docmatch");
    }
    if (info.layout != "docmatch" && info.layout != "bert")
      throw std::runtime_error("layout '" + info.layout + "' is not docmatch or bert");
    return info;
  } catch (const nlohmann::json::exception& e) {
    throw Error("model", path + ": " + e.what());
  }
}

void LoadFolderWeights(torch::nn::Module& module, const std::string& folder, const ModelFolderInfo& info) {
  const std::string path = folder + "/" + info.weights;
  VerifyChecksum(folder, info.weights);
  if (info.layout == "bert") {
    // An `export --format hf` folder: BERT's names, the [CLS] dense layer apart;
    // SDR's word-LM head is not in it and keeps the module's own (fresh)
    // weights, as after import-hf.
    std::map<std::string, torch::Tensor> state =
        BertToDocmatch(ReadSafetensors(path).tensors, "encoder", std::numeric_limits<int64_t>::max(), path);
    if (info.config.kind == "sdr") {
      for (const auto& p : module.named_parameters(true)) {
        if (p.key().rfind("lm_", 0) == 0) state[p.key()] = p.value().detach().clone();
      }
    }
    const std::string dense = folder + "/2_Dense";
    if (fs::exists(dense + "/model.safetensors")) {
      VerifyChecksum(dense, "model.safetensors");
      for (const auto& [name, value] : ReadSafetensors(dense + "/model.safetensors").tensors)
        state["dense." + name.substr(name.find('.') + 1)] = value;  // linear.weight -> dense.weight
    }
    LoadState(module, state, path, "");
  } else if (fs::path(info.weights).extension() == ".safetensors") {
    LoadState(module, ReadSafetensors(path).tensors, path, info.prefix);
  } else {
    LoadModule(module, path, info.prefix);
  }
}

std::unique_ptr<model::DocumentModel> LoadModelFolder(const std::string& folder, ModelFolderInfo* info_out) {
  const ModelFolderInfo info = ReadModelFolderInfo(folder);
  std::unique_ptr<model::DocumentModel> model = model::DocumentModel::Create(info.config);
  LoadFolderWeights(model->module(), folder, info);
  if (info_out) *info_out = info;
  return model;
}

void CheckTokenizer(const ModelFolderInfo& info, const data::Corpus& corpus, const std::string& folder) {
  if (!info.tokenizer_hash.empty() && info.tokenizer_hash != corpus.manifest().tokenizer_hash) {
    throw Error("model", "'" + folder + "' was trained with tokenizer " + info.tokenizer_hash + ", but corpus '" +
                             corpus.directory() + "' was prepared with " + corpus.manifest().tokenizer_hash +
                             ": prepare the corpus with the model's tokenizer (" +
                             (info.tokenizer.empty()
                                  ? std::string("prepare --tokenizer <the tokenizer.model it was trained with>")
                                  : "prepare --tokenizer " + folder + "/" + info.tokenizer) +
                             ")");
  }
}

std::string TokenizerFileOf(const std::string& path) {
  if (!fs::is_directory(path)) return path;
  if (fs::exists(fs::path(path) / data::kManifestFile)) return data::Corpus(path).tokenizer_path();
  if (fs::exists(fs::path(path) / kModelConfigFile)) {
    const ModelFolderInfo info = ReadModelFolderInfo(path);
    if (info.tokenizer.empty()) {
      throw Error("model", "'" + path +
                               "' carries no tokenizer (a checkpoint of an older docmatch): give the corpus it was "
                               "trained on");
    }
    return (fs::path(path) / info.tokenizer).string();
  }
  throw std::runtime_error("'" + path + "' is neither a tokenizer file, a corpus nor a model folder");
}

data::Tokenizer LoadModelTokenizer(const std::string& folder, const ModelFolderInfo& info, const std::string& given) {
  std::string path;
  if (!given.empty()) {
    path = TokenizerFileOf(given);
  } else if (!info.tokenizer.empty()) {
    path = (std::filesystem::path(folder) / info.tokenizer).string();
  } else {
    throw Error("model", "'" + folder +
                             "' carries no tokenizer (a checkpoint of an older docmatch): pass --tokenizer with the "
                             "tokenizer.model of the corpus it was trained on, or that corpus "
                             "folder");
  }
  if (given.empty()) VerifyChecksum(folder, info.tokenizer);
  data::Tokenizer tokenizer = data::Tokenizer::Load(path);
  if (!info.tokenizer_hash.empty() && tokenizer.hash() != info.tokenizer_hash) {
    throw Error("model", "'" + folder + "' was trained with tokenizer " + info.tokenizer_hash + ", but '" + path +
                             "' is " + tokenizer.hash() + ": give the tokenizer of the corpus it was trained on");
  }
  return tokenizer;
}

}  // namespace docmatch::io
