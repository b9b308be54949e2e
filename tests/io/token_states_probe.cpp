// Runs an imported model folder's transformer on given ids and writes the
// token states, for hf_import_check.py to compare with the `transformers`
// library's BertModel on the same inputs.
//
//   token_states_probe MODEL_FOLDER INPUTS.safetensors OUTPUTS.safetensors
//
// INPUTS holds "ids" (B, T) int64 in docmatch ids, kPadId after each row's
// end; OUTPUTS gets "states" (B, T, C) float32: MatchBERT's flat encoder,
// SMITH's sentence encoder with every row one block, or SDR's sentence encoder.
#include <iostream>

#include "io/model_folder.h"
#include "io/safetensors.h"
#include "model/match_bert.h"
#include "model/sdr.h"
#include "model/smith.h"

using namespace docmatch;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: token_states_probe MODEL_FOLDER INPUTS.safetensors OUTPUTS.safetensors\n";
    return 2;
  }
  try {
    io::ModelFolderInfo info;
    std::unique_ptr<model::DocumentModel> model = io::LoadModelFolder(argv[1], &info);
    model->module().eval();
    torch::NoGradGuard no_grad;
    const torch::Tensor ids = io::ReadSafetensors(argv[2]).tensors.at("ids").to(torch::kLong);
    torch::Tensor states;
    if (info.config.kind == "match_bert") {
      states = dynamic_cast<model::FlatEncoderImpl&>(model->module()).Encode(ids);
    } else if (info.config.kind == "smith") {
      auto& smith = dynamic_cast<model::SmithEncoderImpl&>(model->module());
      const int64_t B = ids.size(0), T = ids.size(1);
      TORCH_CHECK(T <= info.config.smith.block_length, "rows must fit one block of ", info.config.smith.block_length);
      // One document per row, one block each: every block is real.
      data::BlockBatch batch;
      batch.B = B;
      batch.S = 1;
      batch.T = T;
      const torch::Tensor narrow = ids.to(torch::kInt32).contiguous();
      batch.tokens.assign(narrow.data_ptr<int32_t>(), narrow.data_ptr<int32_t>() + B * T);
      batch.lm_labels.assign(B * T, data::kIgnoreLabel);
      batch.block_mask.assign(B, 1);
      const model::BlockTensors t = model::ToTensors(batch, torch::kCPU);
      const auto blocks = smith.EncodeBlocks(t.tokens, t.layout);
      states = blocks.tokens.Unpack(blocks.token_states);
    } else if (info.config.kind == "sdr") {
      states = dynamic_cast<model::SentenceEncoderImpl&>(model->module()).Encode(ids);
    } else {
      throw std::runtime_error("not an imported transformer: " + info.config.kind);
    }
    io::WriteSafetensors({{"states", states.contiguous()}}, argv[3]);
  } catch (const std::exception& e) {
    std::cerr << "token_states_probe: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
