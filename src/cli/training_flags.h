// Flags several commands share, defined once: where and how the ranks run
// (device, backend, per-rank logs) and the optimizer's schedule.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "dist/process_group.h"
#include "eval/bm25.h"
#include "train/optimizer.h"

namespace docmatch::cli {

struct DistributedFlags {
  std::string device = "auto";  // cpu, cuda or auto
  dist::Backend backend = dist::Backend::kAuto;
  std::string log_dir;
  double collective_timeout = 300;  // seconds
};
void AddDistributedFlags(CLI::App* app, DistributedFlags* flags);
// --lexical (tfidf or bm25; it needs `weight`, the command's --lexical-weight),
// --bm25-k1 and --bm25-b, as eval and search take them.
void AddLexicalFlags(CLI::App* app, CLI::Option* weight, std::string* lexical, eval::Bm25Parameters* bm25);
// --device alone, for the single-process commands (encode, search); resolve
// it with dist::ProcessDevice.
void AddDeviceFlag(CLI::App* app, std::string* device);

// --model means a model folder in every command (a checkpoint, <run>/best,
// an import or an export); a model YAML is --model-config. These checks say
// which one a wrong path was meant for.
// The command line's words, recorded by main before parsing, so that an
// option a config file set can be told from one typed.
void RememberCommandLine(int argc, char** argv);
bool GivenOnCommandLine(const std::string& flag);

CLI::Validator ModelFolder();
CLI::Validator ModelConfigFile();

// Numeric options: the allowed range in words ("must be above 0, not 0"),
// and NaN and infinities refused, which CLI11's PositiveNumber and Range let
// through (and whose open bound they print as a 300-digit number).
CLI::Validator Positive();                                   // > 0
CLI::Validator NonNegative();                                // >= 0
CLI::Validator InRange(double low, double high);             // low <= x <= high
CLI::Validator LexicalWeight();                              // 0 <= x <= 1, or auto
CLI::Validator AtLeast(double low, const std::string& why);  // low <= x, `why` said in the error
CLI::Validator Finite();                                     // any number but NaN and infinities
// A softmax temperature of cosines: 0.001 to 100. Below, the logits cos / T
// pass 1,000 and the loss overflows into nonsense; above, every candidate
// scores alike.
CLI::Validator TemperatureRange();

// Starts MPI (one process or mpirun's ranks), makes this rank's process group
// (placement, device, the backend every rank agrees on) and runs `body` on
// every rank; a failing rank ends the job (dist/runtime.h).
int RunDistributed(const DistributedFlags& flags, const std::function<int(dist::ProcessGroup& group)>& body);

// run(), with a failed allocation (c10's "can't allocate memory" on the CPU,
// CUDA's out of memory) turned into one error that names the stage's
// --batch-size and what makes a step smaller (`smaller`), instead of a
// 30-frame backtrace. Other errors pass unchanged.
int WithMemoryAdvice(const std::string& stage, int64_t batch_size, const std::string& smaller,
                     const std::function<int()>& run);

// --run, --batch-size (of `item`s), --accumulation, --steps, the optimizer's
// flags, --seed, --checkpoint-every, --keep-last, --log-every, --on-nonfinite,
// --precision, --validate-every, --patience, --fresh and --no-progress (the
// last two inverted into resume / progress).
void AddLoopFlags(CLI::App* app, train::LoopOptions* options, const std::string& item);

// --sentence-lr-scale and --freeze-sentence-steps: SMITH's sentence-block
// encoder trained apart from its document layers (train::SentenceLevel).
void AddSentenceLevelFlags(CLI::App* app, train::LoopOptions* options);

// --grad-cache N for a contrastive objective (`objective`) over `item`s:
// gradient caching, N items a chunk, 0 = off (train/grad_cache.h).
void AddGradCacheFlag(CLI::App* app, int64_t* grad_cache, const std::string& objective, const std::string& item);

// Rank 0 prints how the loop ended (done, stopped early with the best step,
// or interrupted with where it resumes); returns the process exit status:
// 0, or train::kExitInterrupted after a stop signal.
int ReportLoop(const std::string& stage, const train::LoopResult& result, const std::string& run, int rank);

}  // namespace docmatch::cli
