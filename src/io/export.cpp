// `export`: a model folder's encoder to safetensors with its config and
// tokenizer, in docmatch's layout or as a Hugging Face BERT /
// sentence-transformers folder, written under <output>.tmp and renamed when
// complete (export.h).
#include "io/export.h"

#include <glog/logging.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "console/error.h"
#include "data/corpus/corpus.h"
#include "data/text/wordpiece.h"
#include "files/file_writer.h"
#include "io/bert_layout.h"
#include "io/checksums.h"
#include "io/model_folder.h"
#include "io/own_outputs.h"
#include "io/safetensors.h"
#include "model/kinds.h"

namespace docmatch::io {
namespace fs = std::filesystem;
namespace {

using model::HfLayout;

// The kinds with a flat encoder, for a message: "match_bert, sdr, smith".
std::string HfKindNames() {
  std::string names;
  for (const model::ModelKind* kind : model::ModelKinds()) {
    if (kind->hf_layout != nullptr) names += std::string(names.empty() ? "" : ", ") + kind->name;
  }
  return names;
}

// Why the model cannot be written in BERT's layout, or "".
std::string HfRefusal(const ModelFolderInfo& info, const data::Tokenizer& tokenizer) {
  const model::ModelKind& kind = model::FindModelKind(info.config.kind, "[export]");
  if (kind.hf_layout == nullptr) {
    return "its kind is " + info.config.kind + "; the Hugging Face layout holds the transformer encoders of " +
           HfKindNames() + ", other kinds export with --format docmatch";
  }
  if (std::string(tokenizer.kind()) != "wordpiece") {
    return "its tokenizer is SentencePiece; BERT tokenizers read WordPiece vocabularies (models brought in with "
           "import-hf, and what is trained from them)";
  }
  if (!kind.hf_layout(info.config).separator) {
    return "it reads its sequences without [SEP] (separator: false), and BERT tokenizers always add one";
  }
  return "";
}

nlohmann::json BertConfig(const HfLayout& m) {
  return {{"architectures", {"BertModel"}},
          {"model_type", "bert"},
          {"vocab_size", m.vocab_size},
          {"hidden_size", m.hidden},
          {"num_hidden_layers", m.layers},
          {"num_attention_heads", m.heads},
          {"intermediate_size", m.intermediate},
          {"hidden_act", "gelu"},  // erf GELU, as docmatch's layers
          {"hidden_dropout_prob", m.dropout},
          {"attention_probs_dropout_prob", m.dropout},
          {"max_position_embeddings", m.positions},
          {"type_vocab_size", 2},
          {"initializer_range", 0.02},
          {"layer_norm_eps", 1e-12},
          {"pad_token_id", data::kPadId},
          {"position_embedding_type", "absolute"},
          {"dtype", "float32"}};
}

// BertTokenizer's files and sentence-transformers' modules for `m`.
void WriteHfFiles(const std::string& folder, const HfLayout& m, const data::WordPiece& wordpiece,
                  const std::map<std::string, torch::Tensor>& dense) {
  std::string vocab;
  for (int32_t id = 0; id < wordpiece.vocab_size(); ++id) vocab += wordpiece.Piece(id) + "\n";
  files::WriteFile(folder + "/vocab.txt", vocab);
  const data::WordPieceOptions& o = wordpiece.options();
  nlohmann::json specials = {{"pad_token", wordpiece.Piece(data::kPadId)},
                             {"unk_token", wordpiece.Piece(data::kUnkId)},
                             {"cls_token", wordpiece.Piece(data::kClsId)},
                             {"sep_token", wordpiece.Piece(data::kSepId)},
                             {"mask_token", wordpiece.Piece(data::kMaskId)}};
  nlohmann::json tokenizer = specials;
  tokenizer["tokenizer_class"] = "BertTokenizer";
  tokenizer["do_lower_case"] = o.lowercase;
  tokenizer["do_basic_tokenize"] = true;
  tokenizer["tokenize_chinese_chars"] = o.chinese_chars;
  // null: follow do_lower_case, which is what docmatch's options hold unless set apart.
  tokenizer["strip_accents"] = o.strip_accents == o.lowercase ? nlohmann::json() : nlohmann::json(o.strip_accents);
  tokenizer["model_max_length"] = m.positions;
  files::WriteFile(folder + "/tokenizer_config.json", tokenizer.dump(2) + "\n");
  files::WriteFile(folder + "/special_tokens_map.json", specials.dump(2) + "\n");

  nlohmann::json modules = nlohmann::json::array();
  auto add = [&](const std::string& path, const std::string& type) {
    const int index = static_cast<int>(modules.size());
    modules.push_back({{"idx", index},
                       {"name", std::to_string(index)},
                       {"path", path},
                       {"type", "sentence_transformers.models." + type}});
  };
  add("", "Transformer");
  add("1_Pooling", "Pooling");
  fs::create_directories(folder + "/1_Pooling");
  files::WriteFile(folder + "/1_Pooling/config.json", nlohmann::json({{"word_embedding_dimension", m.hidden},
                                                                      {"pooling_mode_cls_token", m.pooling == "cls"},
                                                                      {"pooling_mode_mean_tokens", m.pooling == "mean"},
                                                                      {"pooling_mode_max_tokens", false},
                                                                      {"pooling_mode_mean_sqrt_len_tokens", false}})
                                                              .dump(2) +
                                                          "\n");
  if (!dense.empty()) {
    const std::string path = std::to_string(modules.size()) + "_Dense";
    add(path, "Dense");
    fs::create_directories(folder + "/" + path);
    files::WriteFile(folder + "/" + path + "/config.json", nlohmann::json({{"in_features", m.hidden},
                                                                           {"out_features", m.hidden},
                                                                           {"bias", true},
                                                                           {"activation_function", m.activation}})
                                                                   .dump(2) +
                                                               "\n");
    WriteSafetensors(dense, folder + "/" + path + "/model.safetensors", {{"format", "pt"}});
    WriteChecksums(folder + "/" + path);
  }
  const std::string normalize = std::to_string(modules.size()) + "_Normalize";
  add(normalize, "Normalize");
  fs::create_directories(folder + "/" + normalize);
  files::WriteFile(folder + "/modules.json", modules.dump(2) + "\n");
  files::WriteFile(folder + "/sentence_bert_config.json",
                   nlohmann::json({{"max_seq_length", m.positions}, {"do_lower_case", false}}).dump(2) + "\n");
  files::WriteFile(folder + "/config_sentence_transformers.json",
                   nlohmann::json({{"similarity_fn_name", "cosine"}}).dump(2) + "\n");
}

}  // namespace

std::string ExportModel(const ExportOptions& options) {
  if (options.format != "auto" && options.format != "docmatch" && options.format != "hf") {
    throw Error("export", "--format is auto, docmatch or hf, not '" + options.format + "'");
  }
  if (fs::exists(options.output) && !options.overwrite) {
    throw Error("export", "'" + options.output + "' exists; pass --overwrite to replace it");
  }
  // --overwrite replaces a docmatch model folder, never a folder of someone else's (io/own_outputs.h).
  CheckOwnOutputs({{options.output, Output::kModelFolder}, {options.output + ".tmp", Output::kStaged}},
                  "[export] writes over only a model folder docmatch wrote", "give another --output, or move it away");
  ModelFolderInfo info;
  std::unique_ptr<model::DocumentModel> model = LoadModelFolder(options.model, &info);
  std::string tokenizer_path;
  if (!options.corpus.empty()) {
    const data::Corpus corpus(options.corpus);
    CheckTokenizer(info, corpus, options.model);
    tokenizer_path = corpus.tokenizer_path();
    info.tokenizer_hash = corpus.manifest().tokenizer_hash;
  } else if (!info.tokenizer.empty()) {
    tokenizer_path = options.model + "/" + info.tokenizer;
  } else {
    throw Error("export", "'" + options.model +
                              "' carries no tokenizer (a checkpoint of an older docmatch): give --corpus, the "
                              "corpus the model was trained on");
  }
  const data::Tokenizer tokenizer = data::Tokenizer::Load(tokenizer_path);
  const std::string refusal = HfRefusal(info, tokenizer);
  std::string format = options.format;
  // SMITH's Hugging Face folder holds its sentence encoder alone, so only when asked.
  const model::ModelKind& kind = model::FindModelKind(info.config.kind, "[export]");
  const HfLayout hf = refusal.empty() ? kind.hf_layout(info.config) : HfLayout{};
  if (format == "auto") format = refusal.empty() && hf.whole_model ? "hf" : "docmatch";
  if (format == "hf" && !refusal.empty()) {
    throw Error("export", "'" + options.model + "' cannot be written as a Hugging Face model: " + refusal);
  }

  std::map<std::string, torch::Tensor> tensors, dense;
  for (const auto& p : model->module().named_parameters(true))
    tensors[p.key()] = p.value().detach().to(torch::kCPU, torch::kFloat).contiguous();
  for (const auto& b : model->module().named_buffers(true)) tensors[b.key()] = b.value().to(torch::kCPU);
  if (format == "hf") {
    std::map<std::string, torch::Tensor> bert;
    for (const auto& [name, value] : tensors) {
      if (!hf.dense.empty() && name.rfind(hf.dense + ".", 0) == 0) {
        dense["linear." + name.substr(hf.dense.size() + 1)] = value;
        continue;
      }
      if (std::any_of(hf.left_out.begin(), hf.left_out.end(),
                      [&](const std::string& p) { return name.rfind(p, 0) == 0; }))
        continue;
      const std::string target = BertName(name, hf.prefix);
      DOCMATCH_CHECK(!target.empty(), "export", "docmatch's ", name, " has no place in BERT's layout");
      bert[target] = value;
    }
    bert["embeddings.token_type_embeddings.weight"] = torch::zeros({2, hf.hidden});
    tensors = std::move(bert);
    // A part of a model (SMITH's sentence encoder) does not read back as its kind.
    info.layout = hf.whole_model ? "bert" : kSentenceEncoderLayout;
    LOG(INFO) << "[export] " << hf.what << " in the Hugging Face / sentence-transformers layout"
              << (hf.whole_model || hf.caveat.empty() ? "" : "; " + hf.caveat);
  }

  const std::vector<std::string> kept = ReplaceModelFolder(
      options.output,
      [&](const std::string& tmp) {
        WriteSafetensors(tensors, tmp + "/model.safetensors",
                         {{"format", "pt"}, {"docmatch_kind", info.config.kind}, {"source", options.model}});
        const std::string tokenizer_file = data::TokenizerFileName(tokenizer);
        files::CopyFile(tokenizer_path, tmp + "/" + tokenizer_file);
        info.weights = "model.safetensors";
        info.prefix = "";
        info.stage = "export";
        info.tokenizer = tokenizer_file;
        nlohmann::json config = ModelFolderInfoJson(info);
        if (format == "hf") {
          config.update(BertConfig(hf));
          WriteHfFiles(tmp, hf, data::WordPiece::Parse(tokenizer.serialized_model(), tokenizer_path), dense);
          if (hf.whole_model && !hf.caveat.empty()) LOG(WARNING) << "[export] " << hf.caveat;
        }
        files::WriteFile(tmp + "/" + kModelConfigFile, config.dump(2) + "\n");
        WriteChecksums(tmp);
      },
      "export");
  for (const std::string& name : kept) LOG(INFO) << "[export] kept your '" << name << "' in " << options.output;
  return format;
}

}  // namespace docmatch::io
