// The run folder of a training stage: its lock, resume, checkpoints, config
// record, stop signals and metric logs (training_run.h).
#include "train/training_run.h"

#include <yaml-cpp/yaml.h>

#include <glog/logging.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>
#include <tuple>

#include "console/error.h"
#include "console/interrupt.h"
#include "dist/runtime.h"
#include "files/file_writer.h"
#include "files/lock_file.h"
#include "io/checksums.h"

namespace docmatch::train {
namespace {

constexpr char kTrainerFile[] = "/trainer.json";  // in each step-<N>/ folder

volatile std::sig_atomic_t stop_signal = 0;
volatile std::sig_atomic_t stop_requests = 0;

// The first signal asks for a checkpoint at the end of the step, then a stop.
// A second one (a double Ctrl-C) must not lose that checkpoint: it is only
// acknowledged; a third takes the signal's default action (kills, no
// checkpoint). write(2) is async-signal-safe; logging is not.
extern "C" void OnStopSignal(int number) {
  const int requests = ++stop_requests;
  if (requests == 1) {
    stop_signal = number;
  } else if (requests == 2) {
    constexpr char kMessage[] =
        "\n[train] stopping after this step's checkpoint; a third signal stops at once, without one\n";
    [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
  } else {
    ::signal(number, SIG_DFL);
    ::raise(number);
  }
}

void InstallStopHandlers() {
  stop_signal = 0;
  stop_requests = 0;
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  action.sa_flags = SA_RESTART;  // reads and collectives in flight carry on
  sigemptyset(&action.sa_mask);
  for (int number : {SIGUSR1, SIGTERM, SIGINT}) ::sigaction(number, &action, nullptr);
  // A Ctrl-C that came during the start-up, under the command's handlers
  // (console/interrupt.h), is this run's first stop request.
  if (console::InterruptRequested()) {
    stop_signal = console::InterruptSignal();
    stop_requests = 1;
  }
}

// A CUDA run's dropout draws come from the device's generator; everything
// else (and CPU runs' dropout) from the CPU one, saved in any case.
at::Generator CudaGenerator(const torch::Device& device) { return at::globalContext().defaultGenerator(device); }

// Keeps the lines of a metrics.jsonl whose step is at most `step` (a run
// resumed there logs the later ones again); an unparsable line (a crash
// mid-write) goes too.
void TrimMetrics(const std::string& path, int64_t step) {
  if (!std::filesystem::exists(path)) return;
  std::ifstream in(path);
  std::string kept;
  size_t dropped = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (json.is_object() && json.contains("step") && json["step"].is_number_integer() &&
        json["step"].get<int64_t>() <= step) {
      kept += line + "\n";
    } else {
      ++dropped;
    }
  }
  if (dropped == 0) return;
  files::ReplaceFile(path, kept);
  LOG(INFO) << "[train] " << path << ": dropped " << dropped << " lines logged after step " << step;
}

// torch::load of one checkpoint file, its failure naming the file.
void LoadTorchFile(const std::string& path, const std::function<void(const std::string&)>& load) {
  if (!std::filesystem::exists(path)) throw Error("ckpt", "'" + path + "' is missing");
  try {
    load(path);
  } catch (const c10::Error& e) {
    throw Error("ckpt", "'" + path + "' is unreadable (truncated or damaged): " + e.what_without_backtrace());
  }
}

}  // namespace

nlohmann::json LoopOptionsJson(const LoopOptions& o) {
  return {{"batch_size", o.batch_size},
          {"accumulation", o.accumulation},
          {"steps", o.steps},
          {"lr", o.optimizer.lr},
          {"warmup_steps", o.optimizer.warmup_steps},
          {"total_steps", o.optimizer.total_steps},
          {"weight_decay", o.optimizer.weight_decay},
          {"max_grad_norm", o.optimizer.max_grad_norm},
          {"seed", o.seed},
          {"precision", Name(o.precision)},
          {"validate_every", o.validate_every},
          {"patience", o.patience},
          {"time_split", o.time_split},
          {"sentence_lr_scale", o.sentence_lr_scale},
          {"freeze_sentence_steps", o.freeze_sentence_steps}};
}

TrainingRun::TrainingRun(const std::string& run, int keep_last, dist::ProcessGroup& group)
    : group_(group), device_(group.device()), run_(run), checkpoints_(run, keep_last) {
  InstallStopHandlers();
  if (group.rank() == 0) {
    // <run>/.lock, held for the run's life: a second run on the folder is refused naming the holder.
    lock_ = std::make_unique<files::LockFile>(
        run + "/.lock",
        [&run](const std::string& holder) {
          return "[train] run folder '" + run + "' is in use by another docmatch run (" + holder +
                 "): wait for it to finish, stop it, or give this run another --run";
        },
        /*remove=*/false);
  }
}

TrainingRun::~TrainingRun() = default;

void TrainingRun::OpenLogs(int64_t step) {
  if (group_.rank() != 0) return;
  TrimMetrics(run_ + "/metrics.jsonl", step);
  io::TrimEvents(run_ + "/tensorboard", step);
  events_ = std::make_unique<io::EventWriter>(run_ + "/tensorboard");
  metrics_.open(run_ + "/metrics.jsonl", std::ios::app);
}

nlohmann::json TrainingRun::LatestTrainerState(const std::string& run) {
  const std::optional<std::string> latest = io::CheckpointDirectory(run).Latest();
  if (!latest) return nullptr;
  std::ifstream in(*latest + kTrainerFile);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);  // discarded (null) when it does not parse
}

TrainingRun::ModelSource TrainingRun::SourceOfModel(const std::string& run, bool resume, const std::string& init,
                                                    const std::string& stage, int rank) {
  ModelSource source;
  source.resuming = resume && LatestTrainerState(run).is_object();
  if (!source.resuming) {
    source.folder = init;
    return source;
  }
  source.folder = init.empty() ? "" : *io::CheckpointDirectory(run).Latest();
  if (!init.empty() && rank == 0) {
    LOG(INFO) << "[" << stage << "] " << run << " has checkpoints: resuming it (--init " << init
              << " was read when it started)";
  }
  return source;
}

void TrainingRun::Load(const std::string& folder, torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                       ResumedState* state) {
  const int rank = group_.rank(), world = group_.size();
  io::VerifyChecksums(folder);
  io::LoadModule(module, folder + "/model.pt");
  const std::string trainer = folder + kTrainerFile;
  std::vector<int64_t> positions;
  try {
    std::ifstream in(trainer);
    if (!in) throw std::runtime_error("cannot open it");
    state->trainer = nlohmann::json::parse(in);
    state->step = state->trainer.at("step").get<int64_t>();
    state->epoch = state->trainer.at("epoch").get<int64_t>();
    positions = state->trainer.at("positions").get<std::vector<int64_t>>();
  } catch (const std::exception& e) {
    throw Error("ckpt", "'" + trainer + "' is unreadable: " + e.what());
  }
  // Onto this rank's device, wherever the state was written (every rank's
  // state on cuda:0, or a GPU run resumed on a CPU, would fail later).
  LoadTorchFile(folder + "/optimizer.pt", [&](const std::string& path) { torch::load(optimizer, path, device_); });
  if (static_cast<int>(positions.size()) == world) {
    state->position = positions[rank];
    // This rank's state from a file of one per rank, each file read into a
    // vector of its own (the first GPU run found CUDA's states read after
    // the CPU's into one vector: rank 0 was handed the CPU generator's).
    const auto this_ranks_state = [&](const std::string& file, const char* what) {
      std::vector<torch::Tensor> states;
      LoadTorchFile(folder + "/" + file,
                    [&](const std::string& path) { torch::load(states, path, torch::Device(torch::kCPU)); });
      if (static_cast<int>(states.size()) != world) {
        throw Error("ckpt", "'" + folder + "/" + file + "' holds " + std::to_string(states.size()) + " " + what +
                                " generator states for a " + std::to_string(world) + "-rank run");
      }
      return states.at(rank);
    };
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    cpu.set_state(this_ranks_state("rng.pt", "CPU"));
    if (device_.is_cuda()) {
      if (std::filesystem::exists(folder + "/rng-cuda.pt")) {
        CudaGenerator(device_).set_state(this_ranks_state("rng-cuda.pt", "CUDA"));
      } else if (rank == 0) {
        LOG(WARNING) << "[ckpt] " << folder << " holds no CUDA generator state (written on CPU): "
                     << "dropout draws differ from an uninterrupted run";
      }
    }
  } else {
    // Another world size: restart this epoch's shares where the old ranks
    // were on average; the data sequence changes from here on.
    int64_t consumed = 0;
    for (int64_t p : positions) consumed += p;
    state->position = consumed / world;
    if (rank == 0) {
      LOG(WARNING) << "[ckpt] resuming a " << positions.size() << "-rank run on " << world
                   << " ranks: cursors re-sharded, the data sequence differs from an uninterrupted run";
    }
  }
}

namespace {

// Refuses to resume `folder` when it was trained with another model config or
// tokenizer than this run would write: every checkpoint of the run is then as
// foreign, so the advice keeps them all.
void CheckSameModel(const std::string& run, const std::string& folder, const io::ModelFolderInfo& writes) {
  const std::string advice = ": resume with the options it was started with (" + run +
                             "/config.yaml), or start a new run with another --run (or --fresh, which removes this "
                             "run's checkpoints)";
  io::ModelFolderInfo stored;
  try {
    stored = io::ReadModelFolderInfo(folder);
  } catch (const std::exception&) {
    return;  // a damaged config.json is named by the checksum check that follows
  }
  if (!stored.tokenizer_hash.empty() && stored.tokenizer_hash != writes.tokenizer_hash) {
    throw Error("ckpt", run + " was trained on a corpus prepared with tokenizer " + stored.tokenizer_hash +
                            ", and this corpus was prepared with " + writes.tokenizer_hash + advice);
  }
  const nlohmann::json was = model::ModelConfigToJson(stored.config), is = model::ModelConfigToJson(writes.config);
  if (was != is) {
    std::string keys;
    for (const auto& [key, value] : is.items()) {
      if (!was.contains(key) || was[key] != value)
        keys += (keys.empty() ? "" : ", ") + key + " " + (was.contains(key) ? was[key].dump() : "(unset)") + " -> " +
                value.dump();
    }
    throw Error("ckpt", run + " holds a " + stored.config.kind + " model of another shape than this " + "run's (" +
                            (keys.empty() ? "another kind" : keys) + ")" + advice);
  }
}

}  // namespace

std::optional<ResumedState> TrainingRun::Resume(bool resume, torch::nn::Module& module,
                                                torch::optim::Optimizer& optimizer, const io::ModelFolderInfo& writes) {
  // A stop asked before anything was trained (Ctrl-C while the corpus and
  // the model loaded) ends the run here: there is nothing to checkpoint, and
  // --fresh must not remove the earlier run for a run that is not wanted.
  if (group_.control().Any(stop_requests > 0)) throw console::Interrupted(stop_signal != 0 ? stop_signal : SIGINT);
  if (!resume && group_.rank() == 0) {
    // --fresh: nothing of the earlier run stays beside the new one, where a
    // later resume, `best` or the logs would mix the two.
    // Only docmatch's own: a folder of someone else's there stops the run
    // before anything is removed (io/own_outputs.h).
    std::vector<std::pair<std::string, io::Output>> outputs = checkpoints_.Outputs();
    size_t removed = 0;
    for (const auto& [path, output] : outputs) removed += output == io::Output::kCheckpoint;
    const bool best = std::filesystem::exists(run_ + "/best");
    outputs.insert(outputs.end(), {{run_ + "/best", io::Output::kModelFolder},
                                   {run_ + "/best.tmp", io::Output::kStaged},
                                   {run_ + "/best.old", io::Output::kStaged}});
    io::RemoveOwnOutputs(outputs, "[ckpt] --fresh removes only what docmatch wrote",
                         "move it out of " + run_ + ", or give the new run another --run");
    if (removed > 0 || best) {
      LOG(INFO) << "[ckpt] --fresh: removed " << removed << " checkpoint" << (removed == 1 ? "" : "s")
                << (best ? " and best/" : "") << " of the earlier run in " << run_;
    }
  }
  group_.control().Barrier();
  const auto latest = resume ? checkpoints_.Latest() : std::nullopt;
  if (!latest) {
    OpenLogs(0);
    return std::nullopt;
  }
  CheckSameModel(run_, *latest, writes);
  ResumedState state;
  state.folder = *latest;
  try {
    Load(*latest, module, optimizer, &state);
  } catch (const io::CheckpointMismatch& e) {
    throw Error(e.stage(), e.sentence() + "\nEvery checkpoint of " + run_ +
                               " was made for that model: resume with the options it was started with, or start a "
                               "new run with another --run");
  } catch (const std::exception& e) {
    // Offer the newest complete checkpoint before this one.
    const std::vector<std::string> steps = checkpoints_.Steps();
    const auto it = std::find(steps.begin(), steps.end(), *latest);
    const std::string offer =
        it != steps.begin() && it != steps.end()
            ? "the previous checkpoint is " + *std::prev(it) + ": remove " + *latest + " to resume from it"
            : "no earlier checkpoint is kept: start over with --fresh";
    const auto* error = dynamic_cast<const Error*>(&e);
    throw Error(error ? error->stage() : "ckpt", (error ? error->sentence() : std::string(e.what())) + "\n" + offer);
  }
  OpenLogs(state.step);
  if (group_.rank() == 0) LOG(INFO) << "[ckpt] resumed from " << *latest << " at step " << state.step;
  return state;
}

void TrainingRun::RecordConfig(const std::string& config, bool resumed) {
  if (group_.rank() != 0 || config.empty()) return;
  const std::string path = run_ + "/config.yaml";
  if (resumed && std::filesystem::exists(path)) {
    try {
      const YAML::Node before = YAML::LoadFile(path), now = YAML::Load(config);
      std::string changed;
      for (const auto& section : now) {
        const std::string command = section.first.as<std::string>();
        for (const auto& option : section.second) {
          const std::string name = option.first.as<std::string>();
          if (name == "no-progress" || name == "log-dir") continue;  // how it runs, not what it trains
          const YAML::Node old = before[command] ? before[command][name] : YAML::Node();
          const std::string was = old ? YAML::Dump(old) : "(unset)", is = YAML::Dump(option.second);
          if (was != is) changed += (changed.empty() ? "" : ", ") + name + " " + was + " -> " + is;
        }
      }
      if (!changed.empty()) {
        LOG(WARNING) << "[train] resuming " << run_ << " with options that differ from its config.yaml: " << changed;
      }
    } catch (const YAML::Exception& e) {
      LOG(WARNING) << "[train] " << path << " is unreadable (" << e.what() << "): options not compared";
    }
  }
  files::WriteFile(path, config);
}

std::string TrainingRun::Save(int64_t step, int64_t epoch, int64_t position, torch::nn::Module& module,
                              torch::optim::Optimizer& optimizer, const io::ModelFolderInfo& info,
                              nlohmann::json trainer) {
  const int world = group_.size();
  const std::vector<int64_t> positions = group_.control().AllGather(position);
  // Every rank's generator state (host bytes, CUDA's too) travels on the
  // control plane.
  const auto gather = [&](const at::Generator& generator) {
    const torch::Tensor state = generator.get_state().contiguous();  // uint8, on the host
    std::vector<int64_t> counts;
    const std::vector<uint8_t> all = group_.control().AllGatherUneven(
        std::vector<uint8_t>(state.data_ptr<uint8_t>(), state.data_ptr<uint8_t>() + state.numel()), &counts);
    std::vector<torch::Tensor> states;
    int64_t offset = 0;
    for (int64_t n : counts) {
      states.push_back(torch::from_blob(const_cast<uint8_t*>(all.data()) + offset, {n}, torch::kUInt8).clone());
      offset += n;
    }
    return states;
  };
  const std::vector<torch::Tensor> all_states = gather(at::detail::getDefaultCPUGenerator());
  const std::vector<torch::Tensor> cuda_states =
      device_.is_cuda() ? gather(CudaGenerator(device_)) : std::vector<torch::Tensor>();
  std::string written;
  if (group_.rank() == 0) {
    trainer["step"] = step;
    trainer["epoch"] = epoch;
    trainer["world_size"] = world;
    trainer["positions"] = positions;
    written = checkpoints_.Save(step, [&](const std::string& folder) {
      io::WriteTrainedModelFolder(folder, module, info);
      files::SaveThrough(folder + "/optimizer.pt",
                         [&](const files::ByteWriter& write) { torch::save(optimizer, write); });
      const auto save_states = [&](const std::vector<torch::Tensor>& generators, const std::string& file) {
        files::SaveThrough(folder + "/" + file,
                           [&](const files::ByteWriter& write) { torch::save(generators, write); });
      };
      save_states(all_states, "rng.pt");
      if (!cuda_states.empty()) save_states(cuda_states, "rng-cuda.pt");
      files::WriteFile(folder + kTrainerFile, trainer.dump(2) + "\n");
    });
  }
  group_.control().Barrier();  // nobody runs ahead of a checkpoint being written
  return written;
}

bool TrainingRun::StopRequested(int64_t step) {
  // A host flag on the control plane: no device sync.
  if (!group_.control().Any(stop_signal != 0)) return false;
  if (stop_signal != 0) {
    LOG(WARNING) << "[train] rank " << group_.rank() << " got signal " << stop_signal << " (" << strsignal(stop_signal)
                 << "): checkpoint at step " << step << ", then stop";
  }
  return true;
}

void TrainingRun::Log(int64_t step, const std::string& prefix, const std::map<std::string, double>& values) {
  if (!events_) return;
  nlohmann::json line = {{"step", step}};
  for (const auto& [name, value] : values) {
    line[prefix + "/" + name] = value;
    events_->Scalar(prefix + "/" + name, step, value);
  }
  metrics_ << line.dump() << "\n" << std::flush;
  files::CheckStream(metrics_, run_ + "/metrics.jsonl");
  events_->Flush();
  if (console_lines_) {
    // "[train] step 50  loss 2.306  infonce 2.01  lm 7.1  lr 0.0005  docs_per_s 41.2": the
    // loss first, phase timings left to metrics.jsonl.
    std::ostringstream text;
    text << "[" << prefix << "] step " << step;
    if (values.count("loss")) text << "  loss " << std::setprecision(5) << values.at("loss");
    for (const auto& [name, value] : values) {
      if (name == "loss" || name.rfind("time/", 0) == 0) continue;
      text << "  " << name << " " << std::setprecision(4) << value;
    }
    std::cerr << text.str() << std::endl;
  }
}

}  // namespace docmatch::train
