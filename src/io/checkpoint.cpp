// Module archives with name and shape checks, and the step-<N> folders with
// their .tmp-then-rename writes, `latest` link and pruning (checkpoint.h).
#include "io/checkpoint.h"

#include "console/error.h"
#include "files/file_writer.h"
#include "io/checksums.h"
#include "io/own_outputs.h"

#include <glog/logging.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

namespace docmatch::io {
namespace fs = std::filesystem;
namespace {

std::string Shape(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

// step-<N> -> N, or -1 for anything else (step-<N>.tmp included).
int64_t StepOf(const fs::path& folder) {
  const std::string name = folder.filename().string();
  if (name.rfind("step-", 0) != 0) return -1;
  const std::string digits = name.substr(5);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

}  // namespace

void SaveModule(const torch::nn::Module& module, const std::string& path) {
  torch::serialize::OutputArchive archive;
  // Host copies: a model folder written on a GPU reads on any machine, and
  // loads onto whichever device the reader runs on.
  for (const auto& p : module.named_parameters(/*recurse=*/true))
    archive.write(p.key(), p.value().detach().to(torch::kCPU));
  for (const auto& b : module.named_buffers(/*recurse=*/true))
    archive.write(b.key(), b.value().to(torch::kCPU), /*is_buffer=*/true);
  files::SaveThrough(path, [&](const files::ByteWriter& write) { archive.save_to(write); });
}

std::map<std::string, torch::Tensor> ReadModuleFile(const std::string& path) {
  if (!fs::exists(path)) throw Error("ckpt", "no checkpoint file '" + path + "'");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path, torch::Device(torch::kCPU));  // a file from a GPU (older docmatch) too
  } catch (const c10::Error& e) {
    throw Error("ckpt", "'" + path + "' is not a readable docmatch checkpoint (truncated or foreign): " +
                            e.what_without_backtrace());
  }
  std::map<std::string, torch::Tensor> stored;
  for (const std::string& key : archive.keys()) {
    torch::Tensor t;
    if (archive.try_read(key, t)) stored[key] = t;
  }
  return stored;
}

void LoadModule(torch::nn::Module& module, const std::string& path, const std::string& prefix) {
  LoadState(module, ReadModuleFile(path), path, prefix);
}

void LoadState(torch::nn::Module& module, const std::map<std::string, torch::Tensor>& tensors, const std::string& path,
               const std::string& prefix) {
  std::map<std::string, torch::Tensor> stored;
  for (const auto& [name, tensor] : tensors) {
    if (name.rfind(prefix, 0) == 0) stored[name.substr(prefix.size())] = tensor;
  }
  const std::string origin = prefix.empty() ? path : path + " (tensors under '" + prefix + "')";
  std::vector<std::pair<std::string, torch::Tensor>> wanted;
  for (const auto& p : module.named_parameters(true)) wanted.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(true)) wanted.emplace_back(b.key(), b.value());

  std::vector<std::string> problems;
  for (const auto& [name, tensor] : wanted) {
    const auto it = stored.find(name);
    if (it == stored.end()) {
      problems.push_back("missing from the checkpoint: " + name + " " + Shape(tensor));
    } else if (it->second.sizes() != tensor.sizes()) {
      problems.push_back("shape differs: " + name + " is " + Shape(it->second) + " in the checkpoint, " +
                         Shape(tensor) + " in the model");
    }
  }
  for (const auto& [name, tensor] : stored) {
    const bool known = std::any_of(wanted.begin(), wanted.end(), [&](const auto& w) { return w.first == name; });
    if (!known) problems.push_back("not in the model: " + name + " " + Shape(tensor));
  }
  if (!problems.empty()) {
    std::ostringstream message;
    message << "'" << origin << "' was made for another model or config (" << problems.size()
            << " mismatched tensors):";
    for (const auto& p : problems) message << "\n  " << p;
    throw CheckpointMismatch(message.str());
  }
  for (const auto& [name, tensor] : wanted) {
    const torch::Tensor& value = stored.at(name);
    if (value.is_floating_point() && !torch::isfinite(value).all().item<bool>()) {
      throw Error("ckpt", "'" + origin + "': " + name +
                              " holds NaN or Inf: the file is damaged or the run diverged (resume from an earlier "
                              "checkpoint, or train with --on-nonfinite stop)");
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : wanted) tensor.copy_(stored.at(name).to(tensor.dtype()));
}

CheckpointDirectory::CheckpointDirectory(std::string root, int keep_last)
    : root_(std::move(root)), keep_last_(std::max(1, keep_last)) {
  fs::create_directories(root_);
}

std::string CheckpointDirectory::Save(int64_t step, const std::function<void(const std::string&)>& write) {
  const fs::path final_folder = fs::path(root_) / ("step-" + std::to_string(step));
  const fs::path temporary = final_folder.string() + ".tmp";
  const fs::path link = fs::path(root_) / "latest", staged = fs::path(root_) / "latest.tmp";
  // What this save replaces must be docmatch's: checked once, before anything
  // is written (the run folder's lock keeps others out until it is done).
  const std::vector<std::pair<std::string, Output>> replaced = {{temporary.string(), Output::kStaged},
                                                                {final_folder.string(), Output::kCheckpoint},
                                                                {link.string(), Output::kLink},
                                                                {staged.string(), Output::kLink}};
  const std::string why = "[ckpt] saving step " + std::to_string(step) + " in " + root_;
  const std::string advice = "move it out of " + root_ + ", or give the run another folder";
  CheckOwnOutputs(replaced, why, advice);
  fs::remove_all(temporary);
  fs::create_directories(temporary);
  const fs::path mark = temporary / files::kStagingMark;
  try {
    files::WriteFile(mark.string(), "");
    write(temporary.string());
    WriteChecksums(temporary.string());
    fs::remove(mark);
  } catch (...) {
    fs::remove_all(temporary);
    throw;
  }
  fs::remove_all(final_folder);
  fs::rename(temporary, final_folder);
  // `latest`: a new symlink renamed over the old one (atomic on POSIX).
  fs::remove(staged);
  fs::create_directory_symlink(final_folder.filename(), staged);
  fs::rename(staged, link);
  // Keep the newest keep_last_ checkpoints (Steps() lists docmatch's alone).
  const std::vector<std::string> steps = Steps();
  for (size_t i = 0; i + keep_last_ < steps.size(); ++i) fs::remove_all(steps[i]);
  LOG(INFO) << "[ckpt] saved " << final_folder.string();
  return final_folder.string();
}

std::vector<std::pair<std::string, Output>> CheckpointDirectory::Outputs() const {
  std::vector<std::pair<std::string, Output>> outputs;
  if (fs::exists(root_)) {
    for (const auto& entry : fs::directory_iterator(root_)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("step-", 0) != 0) continue;
      if (StepOf(entry.path()) >= 0) {
        outputs.emplace_back(entry.path().string(), Output::kCheckpoint);
      } else if (entry.path().extension() == ".tmp") {
        outputs.emplace_back(entry.path().string(), Output::kStaged);  // step-<N>.tmp left by a crash
      }
    }
  }
  std::sort(outputs.begin(), outputs.end());
  for (const char* link : {"latest", "latest.tmp"})
    outputs.emplace_back((fs::path(root_) / link).string(), Output::kLink);
  return outputs;
}

std::vector<std::string> CheckpointDirectory::Steps() const {
  std::vector<std::pair<int64_t, std::string>> steps;
  if (fs::exists(root_)) {
    for (const auto& entry : fs::directory_iterator(root_)) {
      const int64_t n = StepOf(entry.path());
      if (n >= 0 && entry.is_directory() && NotDocmatchs(entry.path().string(), Output::kCheckpoint).empty())
        steps.emplace_back(n, entry.path().string());
    }
  }
  std::sort(steps.begin(), steps.end());
  std::vector<std::string> folders;
  for (auto& [n, folder] : steps) folders.push_back(std::move(folder));
  return folders;
}

std::optional<std::string> CheckpointDirectory::Latest() const {
  const fs::path link = fs::path(root_) / "latest";
  std::error_code error;
  if (fs::is_symlink(link, error) && fs::is_directory(link, error)) {
    return (fs::path(root_) / fs::read_symlink(link)).string();
  }
  const std::vector<std::string> steps = Steps();
  if (steps.empty()) return std::nullopt;
  return steps.back();
}

}  // namespace docmatch::io
