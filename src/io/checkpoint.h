// Checkpoints on disk: checkpoints/<run>/step-<N>/, each written under
// step-<N>.tmp and renamed when complete, `latest` (a symlink, replaced
// atomically) naming the newest, and only the last K kept. A half-written
// checkpoint never looks complete, so a crash mid-save loses nothing older.
//
// Module state goes through libtorch's archives; loading checks every tensor
// name and shape first and, when a checkpoint was made for another model or
// config, says which tensors are missing, unexpected or of another shape.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "console/error.h"
#include "io/own_outputs.h"

namespace docmatch::io {

// A checkpoint whose tensors do not fit the model (another model or config):
// not damage, so no other checkpoint of the same run would load either.
class CheckpointMismatch : public Error {
 public:
  explicit CheckpointMismatch(const std::string& sentence) : Error("ckpt", sentence) {}
};

// Parameters and buffers of `module` to `path` (one archive file).
void SaveModule(const torch::nn::Module& module, const std::string& path);
// Loads into `module` after checking names and shapes; throws
// CheckpointMismatch listing every mismatch (and loads nothing) otherwise.
// With `prefix`, only the stored tensors under it count, prefix removed: the
// encoder inside a pre-training checkpoint loads with prefix "encoder.".
void LoadModule(torch::nn::Module& module, const std::string& path, const std::string& prefix = "");
// Every tensor of a SaveModule file, by name.
std::map<std::string, torch::Tensor> ReadModuleFile(const std::string& path);
// The checks and copy of LoadModule, for tensors from anywhere (safetensors);
// `origin` names their source in the error, `prefix` as in LoadModule.
void LoadState(torch::nn::Module& module, const std::map<std::string, torch::Tensor>& tensors,
               const std::string& origin, const std::string& prefix = "");

class CheckpointDirectory {
 public:
  // `root`: e.g. "checkpoints/smith-wp-sp"; keep the newest `keep_last`.
  CheckpointDirectory(std::string root, int keep_last = 3);

  // Calls write(folder) on step-<step>.tmp, then renames it to step-<step>,
  // points `latest` at it and prunes. Returns the final folder. What it
  // replaces or prunes must be docmatch's (own_outputs.h); a folder of
  // someone else's where it writes is refused before anything is written.
  std::string Save(int64_t step, const std::function<void(const std::string& folder)>& write);
  // The folder `latest` names; without it, the highest complete step-<N>.
  std::optional<std::string> Latest() const;
  // Every path of the folder that its checkpoints use (step-<N>,
  // step-<N>.tmp, latest, latest.tmp), as io::RemoveOwnOutputs takes them:
  // what --fresh removes once every one is found to be docmatch's.
  std::vector<std::pair<std::string, Output>> Outputs() const;
  // Every complete step-<N> folder that is docmatch's checkpoint (own_outputs.h), oldest first.
  std::vector<std::string> Steps() const;
  const std::string& root() const { return root_; }

 private:
  std::string root_;
  int keep_last_;
};

}  // namespace docmatch::io
