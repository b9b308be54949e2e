// AdamW the way BERT-family models train: no weight decay on biases and
// LayerNorm weights, linear warm-up then linear decay to zero.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

namespace docmatch::train {

struct OptimizerOptions {
  double lr = 5e-5;              // peak learning rate (SMITH: 5e-5)
  int64_t warmup_steps = 10000;  // linear warm-up (SMITH: 10K)
  int64_t total_steps = 100000;  // decay reaches 0 here
  double weight_decay = 0.01;
  double max_grad_norm = 1.0;  // gradient clipping; <= 0 turns it off
};

// The closed sets among the loop's options, parsed once where the options
// are read (the CLI, ParsePrecision / ParseOnNonFinite) and named back for
// trainer.json and messages.
enum class Precision {
  kFp32,  // fp32: every pass in float32
  kBf16,  // bf16: forward passes under bfloat16 autocast, float32 master weights
};
enum class OnNonFinite {
  kStop,  // a NaN/Inf loss ends the run, naming the step and documents
  kSkip,  // the step is dropped and the run goes on
};
const char* Name(Precision precision);       // "fp32", "bf16"
const char* Name(OnNonFinite on_nonfinite);  // "stop", "skip"
// Throw std::invalid_argument naming the values when `text` is none of them.
Precision ParsePrecision(const std::string& text);
OnNonFinite ParseOnNonFinite(const std::string& text);

// What every training loop (pretrain, finetune) takes besides its data and model.
struct LoopOptions {
  std::string run;           // checkpoint folder of this run
  int64_t batch_size = 8;    // items (documents, pairs) per rank per micro-step
  int64_t accumulation = 1;  // micro-steps per optimizer step
  int64_t steps = 1000;      // optimizer steps in all
  OptimizerOptions optimizer;
  uint64_t seed = 1234;
  int64_t checkpoint_every = 500;
  int keep_last = 3;
  int64_t log_every = 10;
  OnNonFinite on_nonfinite = OnNonFinite::kStop;  // --on-nonfinite stop | skip
  Precision precision = Precision::kFp32;         // --precision fp32 | bf16
  int64_t validate_every = 0;                     // steps between validations; 0: never
  int64_t patience = 0;         // validations without improvement before stopping; 0: never stop early
  bool time_split = false;      // log each phase's time per step (time/*); on GPUs synchronises between phases
  std::string profile_steps;    // "A:B": those steps under PyTorch's profiler (StepProfiler); empty: none
  double bucket_mb = 25;        // MB of fp32 gradient per all-reduce bucket
  bool bf16_gradients = false;  // all-reduce gradients in bf16 (half the bytes)
  bool deterministic = false;   // torch's deterministic algorithms (UseDeterministicAlgorithms)
  std::string attention = "auto";  // how packed encoders attend: auto, unpadded, padded (model::PackedAttention)
  // SMITH's two levels (train/sentence_level.h, SentenceLevel): the
  // sentence-block encoder (embeddings and sentence transformer) at this
  // multiple of the scheduled lr, and not updated at all for the first
  // freeze_sentence_steps steps (the document layers adapt to an imported
  // encoder before it moves).
  double sentence_lr_scale = 1.0;
  int64_t freeze_sentence_steps = 0;
  double max_seconds = 0;  // training time after which the run checkpoints and stops (0: none)
  bool resume = true;
  bool progress = true;
  std::string config_yaml;  // the command's resolved options (--dump-config's YAML), kept in <run>/config.yaml
};

// How a training loop ended.
struct LoopResult {
  int64_t step = 0;        // the last step taken
  int64_t best_step = -1;  // the step of <run>/best, -1 without validation
  double best_valid_loss = 0;
  bool stopped_early = false;  // validation patience ran out
  bool interrupted = false;    // a stop signal: checkpoint written at `step`; the same command resumes
  bool out_of_time = false;    // max_seconds ran out: checkpoint written at `step`
};

// Exit status of a run that a signal stopped after writing its checkpoint
// (EX_TEMPFAIL: run it again). Job scripts requeue on it (cluster/).
constexpr int kExitInterrupted = 75;

// --deterministic: torch's deterministic algorithms (an operation that has
// none then throws, naming itself), cuDNN without autotuning and cuBLAS with
// a fixed workspace (CUBLAS_WORKSPACE_CONFIG=:4096:8 unless set), so that a
// CUDA run repeats, and resumes, bit for bit. CPU runs do so without it.
// Process-wide; call before the first CUDA matrix product.
void UseDeterministicAlgorithms(bool on);

// lr at optimizer step `step` (0-based): peak * (step + 1) / warmup during
// warm-up, then peak * (total - step) / (total - warmup), never below 0.
double LearningRate(const OptimizerOptions& options, int64_t step);

// torch::optim::AdamW whose update is one fused kernel per parameter group
// (at::_fused_adamw_, PyTorch's fused=True path) instead of about six small
// operations per parameter: the same math on the same state (it is an AdamW,
// so optimizer.pt files load either way). A step with a group it cannot fuse
// (mixed devices or dtypes, sparse gradients, amsgrad) takes AdamW's loop.
class FusedAdamW : public torch::optim::AdamW {
 public:
  using AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;

  // Graph-safe steps, for a step captured once and replayed (CUDA graphs):
  // each group's step count and learning rate live in float32 tensors on its
  // parameters' device; step() advances the count in place, reads the lr
  // tensor and changes no host state, so a replay does what the captured
  // step did. The parameters stepped are those with a gradient when
  // MakeCapturable runs (once, after a first backward); each then needs one
  // at every step (a group's share its count; CapturedOptimizerStep checks
  // it before each replay), and the others are never stepped, as a backward
  // that never reaches them leaves them. The counts start from the host
  // state (a resumed run's). SetLearningRate writes the lr tensors (before a
  // step, outside any capture); SyncHostSteps writes the counts back into
  // the host state (a device read: before a checkpoint, outside any
  // capture). Once a step is captured, a graph holds the state's tensors:
  // nothing may replace them (load a checkpoint before, not after).
  void MakeCapturable();
  bool capturable() const { return capturable_; }
  void WriteLearningRates();
  void SyncHostSteps();

 private:
  bool capturable_ = false;
  std::vector<std::vector<torch::Tensor>> stepped_;  // per group, its parameters with a gradient
  std::vector<torch::Tensor> counts_, lrs_;          // per group, 0-d on its parameters' device (undefined: none stepped)
};

// Scales the gradients of `parameters` so that their global 2-norm is at most
// max_norm, as torch::nn::utils::clip_grad_norm_ does, with foreach kernels
// (one per list, not one per parameter) and no host synchronisation. Returns
// the norm before clipping.
torch::Tensor ClipGradientNorm(const std::vector<torch::Tensor>& parameters, double max_norm);
// The same global norm (L2 over every gradient), without clipping.
torch::Tensor GradientNorm(const std::vector<torch::Tensor>& parameters);

// Two groups: decayed (weights) and not decayed (biases, norms, 1-d params).
// With `lower` (a parameter name -> whether it belongs to the lower level,
// e.g. SMITH's sentence-block encoder), two more groups after those hold the
// lower level's parameters, so that it can have its own learning rate
// (the lr_factors of the training loop's step); `lower_groups`, if given, receives which
// groups those are. The optimizer is a FusedAdamW.
std::unique_ptr<torch::optim::AdamW> MakeAdamW(const torch::nn::Module& module, const OptimizerOptions& options,
                                               const std::function<bool(const std::string&)>& lower = {},
                                               std::vector<bool>* lower_groups = nullptr);
// Every parameter group's lr: `lr`, times factors[g] for group g where given.
void SetLearningRate(torch::optim::Optimizer& optimizer, double lr, const std::vector<double>& factors = {});

}  // namespace docmatch::train
