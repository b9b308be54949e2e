// `docmatch export`: a self-contained model folder for serving and for other
// tools. From any model folder (a checkpoint, <run>/best) it writes
//   model.safetensors  the encoder's parameters and buffers, float32, by name
//   config.json        the model folder description (io/model_folder.h)
//                      with "stage": "export" and "tokenizer"
//   tokenizer.model    the SentencePiece model the encoder's ids come from
// under <output>.tmp, renamed when complete. `embed --model <output>` reads it;
// scripts/reference_vector.py recomputes a document vector from it with numpy.
#pragma once

#include <string>

namespace docmatch::io {

// `corpus`: the prepared corpus whose tokenizer the model was trained with
// (checked by hash); may be empty when `model` is itself an export.
void ExportModel(const std::string& model, const std::string& corpus, const std::string& output);

}  // namespace docmatch::io
