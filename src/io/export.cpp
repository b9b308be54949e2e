// `export`: a model folder's encoder to safetensors with its config and
// tokenizer, written under <output>.tmp and renamed when complete (export.h).
#include "io/export.h"

#include <glog/logging.h>

#include <filesystem>

#include "data/corpus/corpus.h"
#include "io/checksums.h"
#include "io/model_folder.h"
#include "io/safetensors.h"

namespace docmatch::io {
namespace fs = std::filesystem;

void ExportModel(const std::string& model_folder, const std::string& corpus_folder, const std::string& output) {
  ModelFolderInfo info;
  std::unique_ptr<model::DocumentModel> model = LoadModelFolder(model_folder, &info);
  std::string tokenizer;
  if (!corpus_folder.empty()) {
    const data::Corpus corpus(corpus_folder);
    CheckTokenizer(info, corpus, model_folder);
    tokenizer = corpus.tokenizer_path();
    info.tokenizer_hash = corpus.manifest().tokenizer_hash;
  } else if (!info.tokenizer.empty()) {
    tokenizer = model_folder + "/" + info.tokenizer;
  } else {
    throw std::runtime_error("[export] '" + model_folder +
                             "' carries no tokenizer: give --corpus, the corpus the model was trained on");
  }
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& p : model->module().named_parameters(true))
    tensors[p.key()] = p.value().detach().to(torch::kCPU, torch::kFloat);
  for (const auto& b : model->module().named_buffers(true)) tensors[b.key()] = b.value().to(torch::kCPU);

  const std::string tmp = output + ".tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  WriteSafetensors(tensors, tmp + "/model.safetensors",
                   {{"format", "pt"}, {"docmatch_kind", info.config.kind}, {"source", model_folder}});
  fs::copy_file(tokenizer, tmp + "/tokenizer.model");
  info.weights = "model.safetensors";
  info.prefix = "";
  info.stage = "export";
  info.tokenizer = "tokenizer.model";
  WriteModelFolderInfo(tmp, info);
  WriteChecksums(tmp);
  fs::remove_all(output);
  fs::rename(tmp, output);
  LOG(INFO) << "[export] " << info.config.kind << " (" << tensors.size() << " tensors) -> " << output;
}

}  // namespace docmatch::io
