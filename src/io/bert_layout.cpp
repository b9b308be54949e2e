// The BERT <-> docmatch name table and the state-dict conversion (bert_layout.h).
#include "io/bert_layout.h"

#include <utility>

namespace docmatch::io {
namespace {

// Within one layer: BERT's name start <-> docmatch's.
constexpr std::pair<const char*, const char*> kLayer[] = {{"attention.self.query.", "attention.query."},
                                                          {"attention.self.key.", "attention.key."},
                                                          {"attention.self.value.", "attention.value."},
                                                          {"attention.output.dense.", "attention.output."},
                                                          {"attention.output.LayerNorm.", "attention_norm."},
                                                          {"intermediate.dense.", "intermediate."},
                                                          {"output.dense.", "output."},
                                                          {"output.LayerNorm.", "output_norm."}};
// Outside the layers.
constexpr std::pair<const char*, const char*> kEmbeddings[] = {
    {"embeddings.word_embeddings.", "embeddings.tokens."},
    {"embeddings.position_embeddings.", "embeddings.positions."},
    {"embeddings.LayerNorm.", "embeddings.norm."}};

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// `name` with its layer prefix `from` + i + "." rewritten through `table`
// (first = from side when `forward`), or "".
template <size_t N>
std::string MapLayer(const std::string& name, const std::string& from, const std::string& to,
                     const std::pair<const char*, const char*> (&table)[N], bool forward) {
  if (!StartsWith(name, from)) return "";
  const size_t dot = name.find('.', from.size());
  if (dot == std::string::npos) return "";
  const std::string layer = name.substr(from.size(), dot - from.size()), rest = name.substr(dot + 1);
  for (const auto& [bert, docmatch] : table) {
    const std::string source = forward ? bert : docmatch, target = forward ? docmatch : bert;
    if (StartsWith(rest, source)) return to + layer + "." + target + rest.substr(source.size());
  }
  return "";
}

}  // namespace

std::string DocmatchName(std::string bert_name, const std::string& encoder) {
  auto respell = [&](const std::string& from, const std::string& to) {
    const size_t at = bert_name.find(from);
    if (at != std::string::npos) bert_name.replace(at, from.size(), to);
  };
  respell("LayerNorm.gamma", "LayerNorm.weight");
  respell("LayerNorm.beta", "LayerNorm.bias");
  if (StartsWith(bert_name, "embeddings.position_embeddings.")) return "";  // summed, see BertToDocmatch
  for (const auto& [bert, docmatch] : kEmbeddings) {
    if (StartsWith(bert_name, bert)) return docmatch + bert_name.substr(std::string(bert).size());
  }
  return MapLayer(bert_name, "encoder.layer.", encoder + ".layers.", kLayer, /*forward=*/true);
}

std::string BertName(const std::string& docmatch_name, const std::string& encoder) {
  for (const auto& [bert, docmatch] : kEmbeddings) {
    if (StartsWith(docmatch_name, docmatch)) return bert + docmatch_name.substr(std::string(docmatch).size());
  }
  return MapLayer(docmatch_name, encoder + ".layers.", "encoder.layer.", kLayer, /*forward=*/false);
}

std::map<std::string, torch::Tensor> BertToDocmatch(const std::map<std::string, torch::Tensor>& bert,
                                                    const std::string& encoder, int64_t positions,
                                                    const std::string& origin, std::vector<std::string>* dropped) {
  std::map<std::string, torch::Tensor> out;
  torch::Tensor position_rows, type_row;
  for (const auto& [name, tensor] : bert) {
    if (name == "embeddings.position_embeddings.weight") {
      position_rows = tensor.slice(0, 0, positions);
    } else if (name == "embeddings.token_type_embeddings.weight") {
      type_row = tensor[0];
    } else if (const std::string target = DocmatchName(name, encoder); !target.empty()) {
      out[target] = tensor;
    } else if (dropped) {
      dropped->push_back(name);
    }
  }
  if (!position_rows.defined())
    throw std::runtime_error(origin + " has no position embeddings (embeddings.position_embeddings.weight)");
  out["embeddings.positions.weight"] = type_row.defined() ? position_rows + type_row : position_rows;
  return out;
}

}  // namespace docmatch::io
