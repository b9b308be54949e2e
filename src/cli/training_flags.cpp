// The shared flags of training_flags.h registered on a subcommand, and the
// ranks' process set-up (placement, backend, per-rank logs) they drive.
#include "cli/training_flags.h"

#include <glog/logging.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/yaml_config.h"
#include "console/error.h"
#include "console/interrupt.h"
#include "dist/runtime.h"
#include "train/step_profiling.h"

namespace docmatch::cli {

namespace {
std::vector<std::string>& CommandLineWords() {
  static std::vector<std::string> words;
  return words;
}

// Rank 0 of an mpirun launch (read before MPI starts), or a process alone.
bool FirstRankOrAlone() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  return rank == nullptr || std::string(rank) == "0";
}
}  // namespace

void RememberCommandLine(int argc, char** argv) { CommandLineWords().assign(argv + 1, argv + argc); }

bool GivenOnCommandLine(const std::string& flag) {
  return std::any_of(CommandLineWords().begin(), CommandLineWords().end(),
                     [&](const std::string& word) { return word == flag || word.rfind(flag + "=", 0) == 0; });
}

void AddDeviceFlag(CLI::App* app, std::string* device) {
  app->add_option("--device", *device,
                  "cpu, cuda or auto: the GPUs when this machine has any (one rank per GPU, or ranks sharing\n"
                  "them over the MPI backend when there are more ranks than GPUs), else the CPU")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
}

CLI::Validator ModelFolder() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        if (std::filesystem::is_directory(path)) return "";
        if (std::filesystem::exists(path)) {
          return "'" + path +
                 "' is a file; --model and --init take a model folder (a checkpoint, <run>/best, an import or an "
                 "export); a model YAML goes to --model-config (pretrain, finetune)";
        }
        return "model folder '" + path + "' does not exist";
      },
      "FOLDER");
}

CLI::Validator ModelConfigFile() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        if (std::filesystem::is_regular_file(path)) return "";
        if (std::filesystem::is_directory(path)) {
          return "'" + path +
                 "' is a folder; --model-config takes a model YAML (configs/models/), a model folder "
                 "goes to --model (or --init)";
        }
        return "model YAML '" + path + "' does not exist";
      },
      "YAML");
}

namespace {

// A finite number within [low, high] (open at low when `above`), or the
// sentence saying what is allowed.
CLI::Validator FiniteBetween(double low, bool above, double high, const std::string& words) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        const bool number = end != text.c_str() && *end == '\0';
        if (number && std::isfinite(value) && (above ? value > low : value >= low) && value <= high) return "";
        return "must be " + words + ", not '" + text + "'";
      },
      "");
}

}  // namespace

CLI::Validator Positive() {
  return FiniteBetween(0, /*above=*/true, std::numeric_limits<double>::max(), "a number above 0");
}
CLI::Validator NonNegative() {
  return FiniteBetween(0, /*above=*/false, std::numeric_limits<double>::max(), "a number of 0 or more");
}
CLI::Validator AtLeast(double low, const std::string& why) {
  std::ostringstream words;
  words << "at least " << low << " (" << why << ")";
  return FiniteBetween(low, /*above=*/false, std::numeric_limits<double>::max(), words.str());
}
CLI::Validator Finite() {
  return FiniteBetween(std::numeric_limits<double>::lowest(), /*above=*/false, std::numeric_limits<double>::max(),
                       "a finite number");
}
CLI::Validator TemperatureRange() {
  return FiniteBetween(0.001, /*above=*/false, 100,
                       "a temperature from 0.001 to 100 (cosine / temperature is the logit)");
}
CLI::Validator LexicalWeight() {
  const CLI::Validator share = InRange(0.0, 1.0);
  return CLI::Validator(
      [share](std::string& text) -> std::string {
        if (text == "auto") return "";
        std::string copy = text;
        return share(copy).empty() ? "" : "must be a number from 0 to 1, or auto, not '" + text + "'";
      },
      "");
}

CLI::Validator InRange(double low, double high) {
  std::ostringstream words;
  words << "a number from " << low << " to " << high;
  return FiniteBetween(low, /*above=*/false, high, words.str());
}

void AddDistributedFlags(CLI::App* app, DistributedFlags* flags) {
  AddDeviceFlag(app, &flags->device);
  app->add_option_function<std::string>(
         "--backend", [flags](const std::string& text) { flags->backend = dist::ParseBackend(text); },
         "auto (NCCL for one rank per GPU, else MPI), mpi (CPU tensors, or GPUs shared by ranks) or nccl")
      ->default_str(dist::Name(flags->backend))
      ->check(CLI::IsMember({"auto", "mpi", "nccl"}));
  app->add_option("--log-dir", flags->log_dir, "every rank also writes its whole log to <dir>/rank-<r>.log.*");
  app->add_option("--collective-timeout", flags->collective_timeout,
                  "seconds a rank waits in one collective before it names the operation and ends the job (a\n"
                  "peer that died, hangs or was stopped); raise it when ranks legitimately wait longer, e.g.\n"
                  "rank 0 writing very large checkpoints to slow storage")
      ->check(Positive())
      ->capture_default_str();
}

namespace {

// Address space a distributed command needs above what its libraries map
// before MPI starts: MPI's and PMIx's segments, the loader threads' stacks
// and malloc arenas, HDF5's caches, a small model and batch.
constexpr int64_t kStartHeadroomMiB = 512;

// Under an address-space limit (ulimit -v) that leaves less than that, MPI's
// start-up aborts with its own banner and HDF5 crashes, neither of which can
// be caught: refuse first, in one line that says what limit would do.
void CheckStartHeadroom() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
  std::ifstream status("/proc/self/status");
  int64_t mapped_kib = -1;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSize:", 0) == 0) mapped_kib = std::stoll(line.substr(7));
  }
  if (mapped_kib < 0) return;
  const int64_t limit_kib = static_cast<int64_t>(limit.rlim_cur / 1024);
  const int64_t need_kib = mapped_kib + kStartHeadroomMiB * 1024;
  if (limit_kib >= need_kib) return;
  throw Error("dist", "out of memory before starting: the address-space limit (ulimit -v " + std::to_string(limit_kib) +
                          ") leaves " + std::to_string(std::max<int64_t>(0, limit_kib - mapped_kib) / 1024) +
                          " MiB above the " + std::to_string(mapped_kib / 1024) +
                          " MiB that docmatch's libraries (libtorch, CUDA, MPI) map, and MPI, HDF5 and the loader "
                          "threads need " +
                          std::to_string(kStartHeadroomMiB) + " MiB more to start: raise it to at least ulimit -v " +
                          std::to_string(need_kib) + " (batches and the model need more on top), or lift it");
}

}  // namespace

void AddLexicalFlags(CLI::App* app, CLI::Option* weight, std::string* lexical, eval::Bm25Parameters* bm25) {
  app->add_option("--lexical", *lexical,
                  "the lexical score of --lexical-weight: tfidf (a TF-IDF cosine over the model's token ids) or "
                  "bm25 (BM25 over the corpus's words as prepare segments them, min-max normalised per query)")
      ->capture_default_str()
      ->check(CLI::IsMember({"tfidf", "bm25"}))
      ->needs(weight);
  app->add_option("--bm25-k1", bm25->k1, "BM25's term-frequency saturation (Lucene's default)")
      ->capture_default_str()
      ->check(NonNegative());
  app->add_option("--bm25-b", bm25->b, "BM25's length normalisation, 0 to 1 (Lucene's default)")
      ->capture_default_str()
      ->check(InRange(0.0, 1.0));
}

int RunDistributed(const DistributedFlags& flags, const std::function<int(dist::ProcessGroup& group)>& body) {
  CheckStartHeadroom();
  // Ctrl-C during MPI's start-up is held back (MPI may set handlers of its
  // own, and its threads inherit the mask), then reaches the handlers set
  // after it; a training run sets its checkpointing ones later and takes over
  // a request that came before (train/training_run.h).
  std::optional<console::HoldInterrupts> held(std::in_place);
  dist::MpiRuntime mpi(nullptr, nullptr);
  if (console::InterruptHandlersInstalled()) console::InstallInterruptHandlers();
  held.reset();
  dist::SetUpRankLogging(mpi.rank(), flags.log_dir);
  // The group outlives the body: a rank that fails reports and ends the job
  // (RunOnAllRanks) before its communicators are torn down, since tearing
  // down NCCL with collectives in flight would wait on peers.
  std::unique_ptr<dist::ProcessGroup> group;
  return dist::RunOnAllRanks([&] {
    group = dist::ProcessGroup::FromLaunch(
        flags.device, flags.backend, std::chrono::milliseconds(static_cast<int64_t>(flags.collective_timeout * 1000)));
    return body(*group);
  });
}

int WithMemoryAdvice(const std::string& stage, int64_t batch_size, const std::string& smaller,
                     const std::function<int()>& run) {
  auto advice = [&](const std::string& what) {
    std::string first = what.substr(0, what.find('\n'));
    // c10's "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: ..." from its own words on
    const size_t own = first.find("DefaultCPUAllocator");
    if (own != std::string::npos) first = first.substr(own);
    return Error(stage, "out of memory at --batch-size " + std::to_string(batch_size) + " (per rank): " + first +
                            ". To fit, use " + smaller);
  };
  try {
    return run();
  } catch (const std::bad_alloc& e) {  // the host's allocators, HDF5's probe (data/corpus/hdf5_util.h)
    throw advice(std::string("host memory: ") + e.what());
  } catch (const c10::OutOfMemoryError& e) {
    throw advice(e.what_without_backtrace());
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    if (what.find("can't allocate memory") == std::string::npos) throw;
    throw advice(what);
  }
}

void AddGradCacheFlag(CLI::App* app, int64_t* grad_cache, const std::string& objective, const std::string& item) {
  app->add_option("--grad-cache", *grad_cache,
                  objective + ": gradient caching, N " + item + " a chunk (0 = off). The batch is embedded N " + item +
                      " at a time without a graph, the loss over the global batch gives each vector's gradient, "
                      "and each chunk is run again to back-propagate it: the same loss and gradients as one pass, "
                      "with one chunk's activations in memory, so --batch-size (the number of negatives) can be "
                      "thousands")
      ->check(NonNegative())
      ->capture_default_str();
}

void AddSentenceLevelFlags(CLI::App* app, train::LoopOptions* o) {
  app->add_option("--sentence-lr-scale", o->sentence_lr_scale,
                  "smith: learning rate of the sentence-block encoder (token embeddings and sentence layers) "
                  "as a multiple of --lr's schedule; the document layers keep --lr (e.g. 0.1 for an imported "
                  "MiniLM under fresh document layers)")
      ->check(NonNegative())
      ->capture_default_str();
  app->add_option("--freeze-sentence-steps", o->freeze_sentence_steps,
                  "smith: the sentence-block encoder is not updated for this many first steps, and runs without "
                  "a graph, so those steps train the document layers alone at a fraction of the time and "
                  "memory (= --steps: they alone are trained)")
      ->check(NonNegative())
      ->capture_default_str();
}

void AddLoopFlags(CLI::App* app, train::LoopOptions* o, const std::string& item) {
  app->add_option("--run", o->run, "checkpoint folder of this run")->capture_default_str();
  app->add_option("--batch-size", o->batch_size, item + " per rank per micro-step")
      ->capture_default_str()
      ->check(Positive());
  app->add_option("--accumulation", o->accumulation, "micro-steps per optimizer step")
      ->capture_default_str()
      ->check(Positive());
  // Bounded where a number of steps stops meaning steps: above it the
  // schedule's warm-up alone outlasts any run, and int64 would saturate.
  app->add_option("--steps", o->steps, "optimizer steps in all")->capture_default_str()->check(InRange(1, 1e12));
  app->add_option("--lr", o->optimizer.lr, "peak learning rate")->capture_default_str()->check(Positive());
  // The schedule follows --steps unless given: -1 until parsed, "auto" in --help and --dump-config.
  o->optimizer.warmup_steps = -1;
  o->optimizer.total_steps = -1;
  CLI::Transformer automatic(std::map<std::string, std::string>{{"auto", "-1"}});
  automatic.description("");
  app->add_option("--warmup-steps", o->optimizer.warmup_steps, "linear warm-up steps (auto: 10% of --steps)")
      ->transform(automatic)
      ->type_name("INT|auto")
      ->default_str("auto");
  app->add_option("--decay-steps", o->optimizer.total_steps,
                  "the learning rate decays linearly to 0 at this step (auto: --steps)")
      ->transform(automatic)
      ->type_name("INT|auto")
      ->default_str("auto");
  app->final_callback([app, o] {
    // --steps typed on the command line over a config file's schedule: the
    // schedule follows the steps typed, unless warm-up or decay were typed too.
    std::vector<std::string> replaced;
    if (GivenOnCommandLine("--steps")) {
      for (auto [flag, value] : {std::pair{"--warmup-steps", &o->optimizer.warmup_steps},
                                 std::pair{"--decay-steps", &o->optimizer.total_steps}}) {
        if (*value >= 0 && !GivenOnCommandLine(flag)) {
          replaced.push_back(std::string(flag) + " " + std::to_string(*value));
          *value = -1;
        }
      }
    }
    if (o->optimizer.warmup_steps < 0) o->optimizer.warmup_steps = std::max<int64_t>(1, o->steps / 10);
    if (o->optimizer.total_steps < 0) o->optimizer.total_steps = o->steps;
    const std::string schedule = "warm-up " + std::to_string(o->optimizer.warmup_steps) + ", decay to 0 at step " +
                                 std::to_string(o->optimizer.total_steps);
    if (!replaced.empty() && FirstRankOrAlone()) {
      LOG(WARNING) << "[config] --steps " << o->steps << " is given on the command line: the schedule follows it ("
                   << schedule << ") instead of the config's " << replaced.front()
                   << (replaced.size() > 1 ? " and " + replaced.back() : "")
                   << "; type --warmup-steps / --decay-steps to set them";
    }
    if (FirstRankOrAlone() && o->optimizer.warmup_steps > o->steps) {
      LOG(WARNING) << "[config] the learning rate warms up over " << o->optimizer.warmup_steps << " steps of a run of "
                   << o->steps << ": it never reaches --lr (" << schedule << ")";
    } else if (FirstRankOrAlone() && o->optimizer.total_steps > o->steps) {
      LOG(WARNING) << "[config] the learning rate decays to 0 at step " << o->optimizer.total_steps
                   << ", after the run's " << o->steps << " steps: it ends at "
                   << static_cast<int64_t>(100.0 * (o->optimizer.total_steps - o->steps) /
                                           std::max<int64_t>(1, o->optimizer.total_steps - o->optimizer.warmup_steps))
                   << "% of --lr (" << schedule << ")";
    }
    // Decay to 0 at step 0 would train at learning rate 0 throughout.
    if (o->optimizer.total_steps == 0) throw CLI::ValidationError("--decay-steps", "must be at least 1, or auto");
    o->config_yaml = CommandConfigYaml(*app);
  });
  app->add_option("--weight-decay", o->optimizer.weight_decay, "AdamW weight decay")
      ->capture_default_str()
      ->check(NonNegative());
  app->add_option("--clip", o->optimizer.max_grad_norm, "gradient norm clip (0 = off)")
      ->capture_default_str()
      ->check(NonNegative());
  app->add_option("--seed", o->seed, "weights, data order and masks")->capture_default_str();
  app->add_option("--checkpoint-every", o->checkpoint_every, "steps between checkpoints")
      ->capture_default_str()
      ->check(Positive());
  app->add_option("--keep-last", o->keep_last, "checkpoints kept")->capture_default_str()->check(Positive());
  app->add_option("--log-every", o->log_every, "steps between metric lines")->capture_default_str()->check(Positive());
  app->add_option_function<std::string>(
         "--on-nonfinite", [o](const std::string& text) { o->on_nonfinite = train::ParseOnNonFinite(text); },
         "a NaN/Inf loss: stop (naming the documents) or skip the step")
      ->default_str(train::Name(o->on_nonfinite))
      ->check(CLI::IsMember({"stop", "skip"}));
  app->add_option("--bucket-mb", o->bucket_mb,
                  "MB of fp32 gradient per all-reduce bucket: buckets are sent while backward still runs, so\n"
                  "smaller ones hide more of the sync behind it, at a per-message latency each\n"
                  "(bench/NOTES.md, Scaling on paper)")
      ->check(Positive())
      ->capture_default_str();
  app->add_flag("--deterministic", o->deterministic,
                "torch's deterministic algorithms, so that a GPU run repeats (and resumes) bit for bit; an\n"
                "operation without one then stops the run naming itself. Slower on GPUs; CPU runs repeat anyway");
  app->add_option("--attention", o->attention,
                  "how SMITH's sentence blocks attend: unpadded (each block's real tokens, CUDA's variable-\n"
                  "length kernels), padded (the blocks x block-length grid under a key mask), or auto:\n"
                  "unpadded on GPUs, padded on CPUs, where it is faster. The same outputs; for A/B runs")
      ->check(CLI::IsMember({"auto", "unpadded", "padded"}))
      ->capture_default_str();
  app->add_flag("--bf16-gradients", o->bf16_gradients,
                "all-reduce gradients in bfloat16: half the bytes, bf16 rounding of the averaged gradient");
  app->add_option_function<std::string>(
         "--precision", [o](const std::string& text) { o->precision = train::ParsePrecision(text); },
         "fp32, or bf16: forward passes under bfloat16 autocast (GPUs with bf16; fp32 master weights)")
      ->default_str(train::Name(o->precision))
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app->add_option("--validate-every", o->validate_every, "steps between validations (0 = never)")
      ->capture_default_str()
      ->check(NonNegative());
  app->add_option("--patience", o->patience, "stop after this many validations without improvement (0 = never)")
      ->capture_default_str()
      ->check(NonNegative());
  app->add_flag("--time-split", o->time_split,
                "log where each step's time goes (time/data_ms, forward, backward, comm, optimizer, other); "
                "on GPUs this synchronises between phases, so measure with it and train without");
  app->add_option("--profile-steps", o->profile_steps,
                  "A:B: run steps A to B (as logged; 20:22) under PyTorch's profiler and write each rank's\n"
                  "Chrome trace to <run>/profile/steps-A-B.rank-R.json: ops and input shapes, and on GPUs\n"
                  "the kernels, copies and CUDA calls (host waits). bench/profile_table.py sums it by op;\n"
                  "chrome://tracing or Perfetto show it. Those steps run slower")
      ->type_name("A:B")
      ->check(CLI::Validator(
          [](std::string& text) {
            try {
              train::ParseStepRange(text);
              return std::string();
            } catch (const std::invalid_argument& e) {
              return std::string(e.what());
            }
          },
          "", "step range"));
  app->add_flag_callback(
      "--fresh", [o] { o->resume = false; },
      "start over: remove the run's checkpoints and best/, restart its logs (default: resume from latest)");
  app->add_flag_callback(
      "--no-progress", [o] { o->progress = false; }, "no progress bar");
}

int ReportLoop(const std::string& stage, const train::LoopResult& result, const std::string& run, int rank) {
  if (rank == 0) {
    if (result.interrupted) {
      std::cout << "[" << stage << "] interrupted by a signal: checkpoint " << run << "/step-" << result.step
                << " written; run the same command to resume" << std::endl;
    } else {
      std::cout << "[" << stage << "] " << (result.stopped_early ? "stopped early" : "done") << " at step "
                << result.step << ", " << run;
      if (result.best_step >= 0) {
        std::cout << "; best validation loss " << result.best_valid_loss << " at step " << result.best_step << " -> "
                  << run << "/best";
      }
      std::cout << std::endl;
    }
  }
  return result.interrupted ? train::kExitInterrupted : 0;
}

}  // namespace docmatch::cli
