// `docmatch inspect` on what training leaves: a model folder (a checkpoint
// step-<N>/, <run>/best, an import or an export) and a run folder (its
// checkpoints, validation record and metrics). The corpus and shard views
// are in inspect_command.cpp.
#include "cli/inspect_runs.h"

#include <glog/logging.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "console/error.h"
#include "io/checkpoint.h"
#include "io/model_folder.h"
#include "model/document_model.h"

namespace docmatch::cli {
namespace fs = std::filesystem;
namespace {

nlohmann::ordered_json ReadJsonFile(const fs::path& path) {
  std::ifstream in(path);
  nlohmann::ordered_json json = nlohmann::ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) throw Error("inspect", "'" + path.string() + "' is not valid JSON");
  return json;
}

// The training stage whose resolved options a run's config.yaml holds (its
// one section: pretrain or finetune), or "".
std::string RunStage(const fs::path& run) {
  std::ifstream in(run / "config.yaml");
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == ':' && line.find(' ') == std::string::npos)
      return line.substr(0, line.size() - 1);
  }
  return "";
}

// What a checkpoint's trainer.json says of where the run stood.
nlohmann::ordered_json CheckpointState(const fs::path& trainer_file) {
  const nlohmann::ordered_json trainer = ReadJsonFile(trainer_file);
  nlohmann::ordered_json state = {{"step", trainer.value("step", int64_t{-1})},
                                  {"epoch", trainer.value("epoch", int64_t{-1})},
                                  {"world_size", trainer.value("world_size", 0)}};
  if (trainer.contains("validation") && trainer["validation"].value("best_step", int64_t{-1}) >= 0) {
    state["best_step"] = trainer["validation"]["best_step"];
    state["best_valid_loss"] = trainer["validation"]["best_loss"];
  }
  return state;
}

}  // namespace

bool IsModelFolder(const std::string& path) { return fs::is_regular_file(fs::path(path) / io::kModelConfigFile); }

bool IsRunFolder(const std::string& path) {
  const fs::path run(path);
  std::error_code ignored;
  return fs::is_directory(run, ignored) && !IsModelFolder(path) &&
         (fs::exists(run / ".lock", ignored) || fs::is_symlink(run / "latest", ignored) ||
          fs::exists(run / "metrics.jsonl", ignored));
}

nlohmann::ordered_json DescribeModelFolder(const std::string& folder) {
  const nlohmann::ordered_json config = ReadJsonFile(fs::path(folder) / io::kModelConfigFile);
  nlohmann::ordered_json out = {{"model_folder", folder},
                                {"kind", config.value("model", nlohmann::ordered_json::object()).value("kind", "")},
                                {"stage", config.value("stage", "")},
                                {"layout", config.value("layout", "docmatch")}};
  if (out["layout"] == io::kSentenceEncoderLayout) {
    out["note"] = "SMITH's sentence encoder alone, for sentence-transformers and transformers";
  } else {
    io::ModelFolderInfo info = io::ReadModelFolderInfo(folder);
    const std::unique_ptr<model::DocumentModel> model = model::DocumentModel::Create(info.config);
    int64_t parameters = 0;
    for (const torch::Tensor& p : model->module().parameters()) parameters += p.numel();
    out["parameters"] = parameters;
    out["dimension"] = model->dimension();
    const fs::path weights = fs::path(folder) / info.weights;
    out["weights"] = {{"file", info.weights}, {"bytes", fs::exists(weights) ? fs::file_size(weights) : 0}};
    out["tokenizer"] = info.tokenizer.empty()
                           ? nlohmann::ordered_json("none (a checkpoint of an older docmatch: give its corpus)")
                           : nlohmann::ordered_json({{"file", info.tokenizer}, {"hash", info.tokenizer_hash}});
  }
  out["model"] = config.value("model", nlohmann::ordered_json::object());
  const fs::path trainer = fs::path(folder) / "trainer.json";
  if (fs::exists(trainer)) out["checkpoint"] = CheckpointState(trainer);
  // step-<N>/, best/ or latest inside a run: the command that made it.
  fs::path normal = fs::path(folder).lexically_normal();
  if (normal.filename().empty()) normal = normal.parent_path();  // "run/latest/"
  const fs::path run = normal.parent_path();
  const std::string stage = RunStage(run.empty() ? "." : run);
  if (!stage.empty()) {
    out["run"] = run.string();
    out["made_by"] = "docmatch " + stage + " --config " + (run / "config.yaml").string();
  }
  return out;
}

nlohmann::ordered_json DescribeRun(const std::string& path) {
  const fs::path run(path);
  const std::string stage = RunStage(run);
  nlohmann::ordered_json out = {{"run", path}, {"stage", stage}};
  if (!stage.empty()) out["made_by"] = "docmatch " + stage + " --config " + (run / "config.yaml").string();
  const io::CheckpointDirectory checkpoints(path);
  std::vector<int64_t> steps;
  for (const std::string& folder : checkpoints.Steps())
    steps.push_back(std::stoll(fs::path(folder).filename().string().substr(5)));
  out["checkpoints"] = steps;
  const std::optional<std::string> latest = checkpoints.Latest();
  if (latest && fs::exists(fs::path(*latest) / "trainer.json")) {
    out["latest"] = CheckpointState(fs::path(*latest) / "trainer.json");
  }
  // A `latest` that names a checkpoint no longer there (removed by hand, or
  // a copy of the run without it): a resume starts from the last step-N/.
  std::error_code ignored;
  const fs::path link = run / "latest";
  if (fs::is_symlink(link, ignored) && !fs::exists(link, ignored)) {
    const std::string target = fs::read_symlink(link, ignored).string();
    const std::string resumes = latest ? "a resume starts from " + *latest : "a resume starts from scratch";
    out["latest_dangling"] = target;
    LOG(WARNING) << "[inspect] " << link.string() << " points to '" << target << "', which does not exist; " << resumes;
  }
  out["best"] = fs::exists(run / "best" / io::kModelConfigFile) ? nlohmann::ordered_json((run / "best").string())
                                                                : nlohmann::ordered_json(nullptr);
  // metrics.jsonl: the training loss at its first and last logged step, the
  // last throughput, and every validation.
  std::ifstream in(run / "metrics.jsonl");
  nlohmann::ordered_json train = nlohmann::ordered_json::object(), valid = nlohmann::ordered_json::object();
  int64_t logged = 0, validations = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json m = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!m.is_object() || !m.contains("step")) continue;
    const int64_t step = m["step"].get<int64_t>();
    if (m.contains("train/loss")) {  // null where the loss was NaN
      if (logged++ == 0) train["first"] = {{"step", step}, {"loss", m["train/loss"]}};
      train["last"] = {{"step", step}, {"loss", m["train/loss"]}};
      if (m.contains("train/docs_per_s")) train["last"]["docs_per_s"] = m["train/docs_per_s"];
    }
    if (m.contains("valid/loss") && m["valid/loss"].is_number()) {  // a NaN is logged as null
      ++validations;
      valid["last"] = {{"step", step}, {"loss", m["valid/loss"]}};
      if (!valid.contains("best") || m["valid/loss"].get<double>() < valid["best"]["loss"].get<double>())
        valid["best"] = {{"step", step}, {"loss", m["valid/loss"]}};
    }
  }
  train["logged"] = logged;
  valid["validations"] = validations;
  out["train"] = train;
  out["valid"] = valid;
  out["plot"] = "scripts/plot-run.py " + path + "  (the loss and validation curves as a PNG)";
  return out;
}

}  // namespace docmatch::cli
