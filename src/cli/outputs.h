// What a command may write over. Every command that writes a file or folder
// (prepare, import-hf, export, embed, encode, eval, index) checks its output
// here first, so that no flag combination destroys what docmatch must keep:
// the command's own inputs, a training run (its checkpoints, `latest`,
// `best/` and logs) or anything inside one.
#pragma once

#include <string>
#include <vector>

namespace docmatch::cli {

// Throws std::invalid_argument, naming `stage` and the reason, when `output`
//   - is, holds or lies inside one of `inputs` (the model, corpus or file the
//     command reads);
//   - is or lies inside a training run's folder (IsRunFolder, inspect_runs.h),
//     or is a checkpoint (trainer.json);
//   - is a symbolic link (a run's `latest`: writing it would turn the link
//     into a folder or replace the checkpoint it names).
void RefuseProtectedOutput(const std::string& stage, const std::string& output, const std::vector<std::string>& inputs);

// Throws docmatch::Error, naming `stage`, when a training run's folder `run`
// is or lies inside one of `inputs` (the corpus, the --init folder, a pair
// file): its checkpoints would be written among them; or when, with `fresh`,
// an input lies inside `run`: --fresh would remove the checkpoint it reads.
void RefuseRunOverInputs(const std::string& stage, const std::string& run, const std::vector<std::string>& inputs,
                         bool fresh);

}  // namespace docmatch::cli
