// `import-hf`: a Hugging Face BERT folder's config, weights and vocabulary mapped
// onto a docmatch model folder, refusing what it cannot map (import_hf.h).
#include "io/import_hf.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "console/error.h"
#include "data/text/tokenizer.h"
#include "data/text/wordpiece.h"
#include "files/file_writer.h"
#include "io/bert_layout.h"
#include "io/checksums.h"
#include "io/model_folder.h"
#include "io/own_outputs.h"
#include "io/safetensors.h"
#include "model/document_model.h"

namespace docmatch::io {
namespace fs = std::filesystem;
namespace {

nlohmann::json ReadJson(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw Error("import", "cannot read " + path.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("import", path.string() + ": " + e.what());
  }
}

std::vector<std::string> ReadVocabulary(const fs::path& path) {
  std::ifstream in(path);
  if (!in) {
    throw Error("import",
                "" + path.parent_path().string() + " has no vocab.txt: docmatch imports WordPiece (BERT) vocabularies");
  }
  std::vector<std::string> pieces;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    pieces.push_back(line);
  }
  return pieces;
}

// Refuses what docmatch's BERT layer cannot reproduce exactly.
void CheckArchitecture(const nlohmann::json& c, const std::string& origin) {
  auto refuse = [&](const std::string& why) { throw Error("import", origin + ": " + why); };
  const std::string type = c.value("model_type", "bert");
  if (type != "bert") {
    refuse("model_type '" + type +
           "' is not BERT; docmatch imports BERT-family encoders (post-LN layers, absolute positions, WordPiece)");
  }
  const std::string act = c.value("hidden_act", "gelu");
  if (act != "gelu") {
    refuse("hidden_act '" + act + "' is not the erf GELU docmatch's layers use ('gelu')");
  }
  const std::string positions = c.value("position_embedding_type", "absolute");
  if (positions != "absolute") refuse("position_embedding_type '" + positions + "': docmatch has absolute positions");
  if (c.value("is_decoder", false) || c.value("add_cross_attention", false)) refuse("a decoder is not an encoder");
  const double eps = c.value("layer_norm_eps", 1e-12);
  if (std::abs(eps - 1e-12) > 1e-15) {
    refuse("layer_norm_eps " + std::to_string(eps) + " differs from docmatch's 1e-12");
  }
  for (const char* key : {"hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers", "vocab_size",
                          "max_position_embeddings"}) {
    if (!c.contains(key)) refuse(std::string("config.json has no '") + key + "'");
  }
  if (!c.value("pruned_heads", nlohmann::json::object()).empty()) refuse("pruned attention heads are not supported");
}

// The sizes every docmatch transformer config shares, from BERT's config.json.
template <typename Config>
void SetTransformerSizes(const nlohmann::json& c, int64_t rows, double dropout, Config* out) {
  out->vocab_size = rows;
  out->hidden = c["hidden_size"];
  out->heads = c["num_attention_heads"];
  out->intermediate = c["intermediate_size"];
  out->dropout = dropout;
}

bool Lowercase(const ImportOptions& options, const fs::path& input) {
  if (options.lowercase == "true") return true;
  if (options.lowercase == "false") return false;
  if (options.lowercase != "auto") throw Error("import", "--lowercase is auto, true or false");
  if (fs::exists(input / "tokenizer_config.json")) {
    const nlohmann::json t = ReadJson(input / "tokenizer_config.json");
    if (t.contains("do_lower_case") && t["do_lower_case"].is_boolean()) return t["do_lower_case"].get<bool>();
  }
  return true;  // BERT's BertTokenizer default
}

}  // namespace

nlohmann::json ImportReport::ToJson() const {
  nlohmann::json moved = nlohmann::json::array();
  for (const auto& [from, to] : moved_ids) moved.push_back({{"bert", from}, {"docmatch", to}});
  return {{"source_config", source},
          {"model", model},
          {"mapped_tensors", mapped_tensors},
          {"mapped_parameters", mapped_parameters},
          {"dropped", dropped},
          {"fresh", fresh},
          {"moved_ids", moved}};
}

// How a sentence-transformers folder pools its token states (1_Pooling/):
// "mean" or "cls"; a plain BERT checkpoint: "cls".
std::string CheckpointPooling(const fs::path& input) {
  if (!fs::exists(input / "1_Pooling/config.json")) return "cls";
  const nlohmann::json p = ReadJson(input / "1_Pooling/config.json");
  const std::string mode = p.value("pooling_mode", "");  // sentence-transformers 6; older: one flag a mode
  if (mode == "mean" || p.value("pooling_mode_mean_tokens", false)) return "mean";
  if (mode != "cls" && !p.value("pooling_mode_cls_token", false)) {
    throw Error("import",
                "" + (input / "1_Pooling/config.json").string() + ": only mean or [CLS] pooling is supported");
  }
  return "cls";
}

namespace {

// Each kind import-hf writes: its config from the checkpoint's config.json
// `c` (with `rows` embedding rows) and the options, returning the length of
// the sequences it reads (0: it reads no positions); and where BERT's layers
// go (nullptr: it takes the word embeddings alone).
struct ImportedKind {
  const char* kind;
  const char* encoder;
  int64_t (*configure)(const nlohmann::json& c, int64_t rows, const ImportOptions& options, const fs::path& input,
                       model::ModelConfig* config);
};

int64_t ConfigureMatchBert(const nlohmann::json& c, int64_t rows, const ImportOptions& options, const fs::path& input,
                           model::ModelConfig* config) {
  model::MatchBertConfig& m = config->match_bert;
  SetTransformerSizes(c, rows, options.dropout, &m);
  m.layers = c["num_hidden_layers"];
  m.max_tokens = options.max_tokens;
  if (m.max_tokens == 0 && fs::exists(input / "sentence_bert_config.json")) {
    m.max_tokens = ReadJson(input / "sentence_bert_config.json").value("max_seq_length", int64_t{0});
  }
  if (m.max_tokens == 0) m.max_tokens = c["max_position_embeddings"].get<int64_t>();
  m.pooling = options.pooling == "auto" ? CheckpointPooling(input) : options.pooling;
  m.separator = true;  // BERT reads [CLS] ... [SEP]
  m.chunks = options.chunks;
  m.window_pooling = options.window_pooling;
  return m.max_tokens;
}

int64_t ConfigureSmith(const nlohmann::json& c, int64_t rows, const ImportOptions& options, const fs::path& input,
                       model::ModelConfig* config) {
  model::SmithConfig& s = config->smith;
  SetTransformerSizes(c, rows, options.dropout, &s);
  s.sentence_layers = c["num_hidden_layers"];
  s.document_layers = options.document_layers;
  s.block_length = options.block_length;
  s.max_blocks = options.max_blocks;
  s.combine = options.combine;
  s.block_pooling = options.pooling == "auto" ? CheckpointPooling(input) : options.pooling;
  s.separator = true;  // BERT reads [CLS] ... [SEP]
  return s.block_length;
}

// SDR's sentence encoder, mean-pooled over [CLS] sentence [SEP] as the BERT
// checkpoint read its inputs (the paper continues RoBERTa).
int64_t ConfigureSdr(const nlohmann::json& c, int64_t rows, const ImportOptions& options, const fs::path&,
                     model::ModelConfig* config) {
  model::SdrConfig& s = config->sdr;
  SetTransformerSizes(c, rows, options.dropout, &s);
  s.layers = c["num_hidden_layers"];
  const int64_t positions = c["max_position_embeddings"].get<int64_t>();
  s.max_tokens = options.max_tokens > 0 ? options.max_tokens : std::min<int64_t>(128, positions);
  s.separator = true;
  return s.max_tokens;
}

// The bag of embeddings: the checkpoint's word embeddings, averaged over a
// document's first --max-tokens tokens (0: the bag's default).
int64_t ConfigureBag(const nlohmann::json& c, int64_t rows, const ImportOptions& options, const fs::path&,
                     model::ModelConfig* config) {
  model::BagConfig& b = config->bag;
  b.vocab_size = rows;
  b.hidden = c["hidden_size"];
  if (options.max_tokens > 0) b.max_tokens = options.max_tokens;
  return 0;
}

const std::vector<ImportedKind>& ImportedKinds() {
  static const std::vector<ImportedKind> kinds = {{"match_bert", "encoder", ConfigureMatchBert},
                                                  {"smith", "sentence_encoder", ConfigureSmith},
                                                  {"sdr", "encoder", ConfigureSdr},
                                                  {"bag", nullptr, ConfigureBag}};
  return kinds;
}

const ImportedKind& FindImportedKind(const std::string& kind) {
  for (const ImportedKind& k : ImportedKinds()) {
    if (kind == k.kind) return k;
  }
  std::string names;
  for (const std::string& n : ImportKinds()) names += (names.empty() ? "" : ", ") + n;
  throw Error("import", "--kind is " + names + ", not '" + kind + "'");
}

}  // namespace

std::vector<std::string> ImportKinds() {
  std::vector<std::string> names;
  for (const ImportedKind& k : ImportedKinds()) names.emplace_back(k.kind);
  return names;
}

namespace {

// A hub cache's repository folder (models--org--name) -> its snapshot:
// the one refs/main names, or the only one; "" when `repository` is not one.
std::string Snapshot(const fs::path& repository) {
  const fs::path snapshots = repository / "snapshots";
  if (!fs::is_directory(snapshots)) return "";
  std::ifstream ref(repository / "refs" / "main");
  std::string hash;
  if (ref >> hash && fs::is_directory(snapshots / hash)) return (snapshots / hash).string();
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(snapshots))
    if (entry.is_directory()) found.push_back(entry.path());
  if (found.size() == 1) return found.front().string();
  throw Error("import", "'" + repository.string() + "' is a Hugging Face cache folder with " +
                            std::to_string(found.size()) + " snapshots and no refs/main: give one of " +
                            snapshots.string() + "/<hash>");
}

}  // namespace

std::string ResolveHuggingFaceFolder(const std::string& given, std::string* said) {
  if (given.empty()) throw Error("import", "no model folder given");
  if (fs::is_directory(given)) {
    const std::string snapshot = Snapshot(given);
    if (snapshot.empty()) return given;
    *said = "[import] " + given + " is a Hugging Face cache folder: reading its snapshot " + snapshot;
    return snapshot;
  }
  if (fs::exists(given)) throw Error("import", "'" + given + "' is a file; import-hf reads a model folder");
  // org/name (or a bare name): the local hub cache, as huggingface_hub lays it out.
  const bool hub_id = given.find("..") == std::string::npos && given.front() != '/' && given.front() != '.' &&
                      std::count(given.begin(), given.end(), '/') <= 1;
  if (!hub_id) throw Error("import", "model folder '" + given + "' does not exist");
  // huggingface_hub's order: HF_HUB_CACHE, the older HUGGINGFACE_HUB_CACHE, HF_HOME/hub,
  // XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub.
  fs::path cache;
  if (const char* hub = std::getenv("HF_HUB_CACHE")) {
    cache = hub;
  } else if (const char* legacy = std::getenv("HUGGINGFACE_HUB_CACHE")) {
    cache = legacy;
  } else if (const char* home = std::getenv("HF_HOME")) {
    cache = fs::path(home) / "hub";
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME")) {
    cache = fs::path(xdg) / "huggingface" / "hub";
  } else if (const char* user = std::getenv("HOME")) {
    cache = fs::path(user) / ".cache" / "huggingface" / "hub";
  }
  // huggingface_hub keeps org/name in models--org--name.
  const size_t slash = given.find('/');
  const std::string repository =
      "models--" + (slash == std::string::npos ? given : given.substr(0, slash) + "--" + given.substr(slash + 1));
  if (!cache.empty() && fs::is_directory(cache / repository)) {
    const std::string snapshot = Snapshot(cache / repository);
    if (!snapshot.empty()) {
      *said = "[import] " + given + ": the Hugging Face cache's snapshot " + snapshot;
      return snapshot;
    }
  }
  throw Error("import", "'" + given + "' is not a folder" +
                            (cache.empty() ? "" : ", nor in the Hugging Face cache " + cache.string()) +
                            ", and docmatch downloads nothing: fetch it with `huggingface-cli download " + given +
                            "` (it prints the folder), or in Python huggingface_hub.snapshot_download(\"" + given +
                            "\"), then give that folder");
}

ImportReport ImportHuggingFace(const ImportOptions& options) {
  const fs::path input(options.input);
  ImportReport report;
  report.source = ReadJson(input / "config.json");
  const nlohmann::json& c = report.source;
  CheckArchitecture(c, (input / "config.json").string());
  if (!fs::exists(input / "model.safetensors")) {
    throw Error("import", input.string() +
                              " has no model.safetensors (a pickled pytorch_model.bin is not read: convert it, "
                              "as scripts/fetch-models.py does, with safetensors.torch.save_file)");
  }
  if (fs::exists(options.output) && !options.overwrite) {
    throw Error("import", "'" + options.output + "' exists; pass --overwrite to replace it");
  }
  // --overwrite replaces a docmatch model folder, never a folder of someone else's (io/own_outputs.h).
  CheckOwnOutputs({{options.output, Output::kModelFolder}, {options.output + ".tmp", Output::kStaged}},
                  "[import] writes over only a model folder docmatch wrote", "give another --output, or move it away");

  // Vocabulary, special tokens to docmatch's ids.
  std::vector<std::string> bert_vocab = ReadVocabulary(input / "vocab.txt");
  const int64_t rows = c["vocab_size"].get<int64_t>();
  if (static_cast<int64_t>(bert_vocab.size()) > rows) {
    throw Error("import", "vocab.txt has " + std::to_string(bert_vocab.size()) + " pieces but the embedding only " +
                              std::to_string(rows) + " rows");
  }
  for (int64_t i = static_cast<int64_t>(bert_vocab.size()); i < rows; ++i) {
    bert_vocab.push_back("[docmatch-unused-row-" + std::to_string(i) + "]");  // never produced by tokenizing
  }
  std::vector<int64_t> order(rows);  // docmatch id -> BERT id
  for (int64_t i = 0; i < rows; ++i) order[i] = i;
  const char* specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (int64_t target = 0; target < 5; ++target) {
    const auto it = std::find(bert_vocab.begin(), bert_vocab.end(), specials[target]);
    if (it == bert_vocab.end()) {
      throw Error("import", std::string("vocab.txt has no ") + specials[target] +
                                ": docmatch needs [PAD] [UNK] [CLS] [SEP] [MASK]");
    }
    const int64_t bert_id = it - bert_vocab.begin();
    const int64_t at = std::find(order.begin(), order.end(), bert_id) - order.begin();
    std::swap(order[target], order[at]);
  }
  std::vector<std::string> pieces(rows);
  for (int64_t d = 0; d < rows; ++d) {
    pieces[d] = bert_vocab[order[d]];
    if (order[d] != d) report.moved_ids.emplace_back(order[d], d);
  }
  data::WordPieceOptions wordpiece_options;
  wordpiece_options.lowercase = Lowercase(options, input);
  wordpiece_options.strip_accents = wordpiece_options.lowercase;
  if (fs::exists(input / "tokenizer_config.json")) {
    const nlohmann::json t = ReadJson(input / "tokenizer_config.json");
    if (t.contains("strip_accents") && t["strip_accents"].is_boolean())
      wordpiece_options.strip_accents = t["strip_accents"].get<bool>();
    if (t.contains("tokenize_chinese_chars") && t["tokenize_chinese_chars"].is_boolean())
      wordpiece_options.chinese_chars = t["tokenize_chinese_chars"].get<bool>();
  }

  // The docmatch model config.
  const ImportedKind& imported = FindImportedKind(options.kind);
  model::ModelConfig config;
  config.kind = options.kind;
  const int64_t positions = c["max_position_embeddings"].get<int64_t>();
  const int64_t length = imported.configure(c, rows, options, input, &config);
  model::CheckModelConfig(config, "[import] the docmatch model (from the options)");
  if (length > positions) {
    throw Error("import", "sequences of " + std::to_string(length) + " tokens need more than the " +
                              std::to_string(positions) + " positions the checkpoint has");
  }
  report.model = model::ModelConfigToJson(config);
  torch::manual_seed(options.seed);
  std::unique_ptr<model::DocumentModel> model = model::DocumentModel::Create(config);
  std::map<std::string, torch::Tensor> targets;
  for (const auto& p : model->module().named_parameters(true)) targets[p.key()] = p.value();

  // Weights.
  const std::string weights_path = (input / "model.safetensors").string();
  std::map<std::string, torch::Tensor> source = ReadSafetensors(weights_path).tensors;
  const std::string prefix = source.count("bert.embeddings.word_embeddings.weight") > 0 ? "bert." : "";
  const std::string encoder = imported.encoder != nullptr ? imported.encoder : "encoder";
  std::map<std::string, torch::Tensor> bert;  // BertModel's names
  for (const auto& [name, tensor] : source) {
    if (name.rfind(prefix, 0) == 0) {
      bert[name.substr(prefix.size())] = tensor;
    } else {
      report.dropped.push_back(name);
    }
  }
  std::vector<std::string> dropped;
  std::map<std::string, torch::Tensor> mapped =
      BertToDocmatch(bert, encoder, std::max<int64_t>(length, 1), weights_path, &dropped);
  if (imported.encoder == nullptr) {  // the word embeddings alone
    for (auto it = mapped.begin(); it != mapped.end();) {
      if (it->first == "embeddings.tokens.weight") {
        ++it;
        continue;
      }
      dropped.push_back(BertName(it->first, encoder));
      it = mapped.erase(it);
    }
  }
  for (const std::string& name : dropped) report.dropped.push_back(prefix + name);
  std::set<std::string> written;
  torch::NoGradGuard no_grad;
  const torch::Tensor permutation = torch::tensor(order, torch::kLong);
  for (const auto& [target, tensor] : mapped) {
    const std::string from =
        prefix + (target == "embeddings.positions.weight" ? "embeddings.position_embeddings + token_type_embeddings[0]"
                                                          : BertName(target, encoder));
    const auto it = targets.find(target);
    if (it == targets.end()) throw Error("import", from + ": docmatch has no " + target);
    const torch::Tensor value = target == "embeddings.tokens.weight" ? tensor.index_select(0, permutation) : tensor;
    if (it->second.sizes() != value.sizes()) {
      std::ostringstream m;
      m << "[import] " << from << " is " << value.sizes() << ", docmatch's " << target << " is " << it->second.sizes();
      throw std::runtime_error(m.str());
    }
    it->second.copy_(value.to(torch::kFloat));
    written.insert(target);
    ++report.mapped_tensors;
    report.mapped_parameters += value.numel();
  }
  const std::string layer_prefix = encoder + ".layers.";
  for (const auto& [name, _] : targets) {
    if (written.count(name)) continue;
    // The imported encoder must be complete; only layers BERT lacks stay fresh.
    if (name.rfind("embeddings.", 0) == 0 || name.rfind(layer_prefix, 0) == 0) {
      throw Error("import", weights_path + " has nothing for docmatch's " + name);
    }
    report.fresh.push_back(name);
  }

  // The folder: weights, tokenizer, config, report.
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& [name, value] : targets) tensors[name] = value.detach().contiguous();
  const std::vector<std::string> kept = ReplaceModelFolder(
      options.output,
      [&](const std::string& tmp) {
        WriteSafetensors(tensors, tmp + "/model.safetensors",
                         {{"format", "pt"}, {"docmatch_kind", config.kind}, {"source", options.input}});
        const data::WordPiece wordpiece(pieces, wordpiece_options, data::kUnkId);
        const data::Tokenizer tokenizer = data::Tokenizer::SaveWordPiece(wordpiece, tmp + "/" + data::kWordPieceFile);
        ModelFolderInfo info;
        info.config = config;
        info.weights = "model.safetensors";
        info.stage = "import";
        info.tokenizer_hash = tokenizer.hash();
        info.tokenizer = data::kWordPieceFile;
        WriteModelFolderInfo(tmp, info);
        files::WriteFile(tmp + "/import.json", report.ToJson().dump(2) + "\n");
        WriteChecksums(tmp);
      },
      "import");
  for (const std::string& name : kept) LOG(INFO) << "[import] kept your '" << name << "' in " << options.output;
  return report;
}

}  // namespace docmatch::io
