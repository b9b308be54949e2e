// SMITH pre-training's micro-step replayed from CUDA graphs (pretrain
// --cuda-graphs), one graph a step bucket (data/batches/step_buckets.h). At
// batch 32 on the paper's model the eager step launches about 1,000 kernels
// for 17 ms of GPU work, so the GPU idles half the step; a graph is one
// launch. Every batch of a bucket has the bucket's tensor shapes, so one
// capture serves them all.
//
// A bucket's graph reads static inputs and writes static outputs: the
// batch's tensors (copied in before each replay), the loss's scales (this
// rank's share of the global means: world size / global count, times the
// loop's 1/accumulation, copied in too, since counts differ within a bucket),
// and the local sums the logs and the non-finite check read after the
// replay. Forward, loss and backward are captured here; the update after
// the step's micro-steps is CapturedOptimizerStep's graph, below.
//
// Gradients: a graph's backward accumulates in place into the .grad tensors
// that exist when it is captured, made by the eager backward of the bucket's
// first use(s) (`warmup_steps`, on the capture stream, which also settles
// the libraries' lazy set-up). So the loop zeroes them instead of dropping
// them (TrainingStage::CapturesSteps), every graph writes where the
// optimizer reads, micro-steps accumulate, and all graphs can share one
// memory pool that holds only each replay's temporaries, in any order of
// buckets.
//
// Safe to replay, read from the code (and only where the bucket path holds):
// no host read and no host-made tensor between forward and backward;
// dropout draws from the CUDA generator, which a capture registers, so each
// replay draws anew; autocast's weight cache is off while capturing (a cast
// the graph replays is made inside it); the backward runs with autocast off,
// as the loop's own backward does.
//
// Graphs run at one rank: the step's collectives (the block pool's
// all-gather, the gradients' all-reduce) are not captured. Without capture
// (`capture` false, or not on CUDA) the same body runs eagerly on the static
// inputs, its loss back-propagated by the loop: how the CPU tests check the
// static inputs, the scales and the sums read back.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "data/batches/blocks.h"
#include "data/batches/step_buckets.h"
#include "dist/process_group.h"
#include "model/document_model.h"
#include "model/smith.h"
#include "train/finetune_batches.h"
#include "train/objectives.h"
#include "train/optimizer.h"

namespace docmatch::train {

struct GraphStream;  // a capture stream and its graphs' shared memory pool (CUDA only)

// DOCMATCH_GRAPH_PATH_ON_CPU=1: --cuda-graphs may run on CPU, taking the
// graphs' code path with nothing captured (static inputs, the update's body,
// eagerly): how the CPU tests reach the loop's wiring of it.
bool GraphPathOnCpu();

// What any --cuda-graphs run needs, checked before its first step (throws
// a DocmatchError prefixed by `stage`, saying what to do): a CUDA device (or
// the CPU hook above, then a warning says nothing is captured), one rank,
// and the sentence level never frozen (thawing it changes the backward).
void CheckCudaGraphsRun(const char* stage, const dist::ProcessGroup& group, int64_t freeze_sentence_steps);

class CapturedSmithSteps {
 public:
  struct Options {
    bool sentence_blocks = true;  // wp+sp (true) or wp
    bool detach_block_targets = false;
    bool capture = true;   // graphs on a CUDA device at one rank; false: the static inputs, eagerly
    int warmup_steps = 1;  // eager uses of a bucket before its capture (at least 1: they make the gradients)
  };
  CapturedSmithSteps(model::SmithPretraining model, dist::ProcessGroup& group, Options options);
  ~CapturedSmithSteps();
  CapturedSmithSteps(const CapturedSmithSteps&) = delete;
  CapturedSmithSteps& operator=(const CapturedSmithSteps&) = delete;

  // Whether steps are captured and replayed (capture asked, CUDA, one rank).
  bool captures() const { return captures_; }

  // A micro-step on `batch`, whose real counts are `real` (data::CountStep)
  // and bucket `shape` (data::BucketFor): its objective's value and parts as
  // SmithPretraining gives them. `scale` is what the loop's Backward scales
  // the loss by (1 / accumulation). Where steps are captured, forward and
  // backward have run (eagerly on a bucket's first uses, then replayed), the
  // returned loss is undefined and its `backward` only checks the scale;
  // otherwise the loss is defined and Backward runs it as any objective's.
  Objective Step(const data::BlockBatch& batch, const data::StepCounts& real, const data::StepShape& shape,
                 double scale);

  int64_t buckets() const { return static_cast<int64_t>(entries_.size()); }  // static input sets made
  int64_t graphs() const { return graphs_; }                                  // captures made
  int64_t replays() const { return replays_; }

 private:
  struct Entry;  // a bucket's static inputs, outputs and graph
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;  // B, S, T, R, N, M, P

  Entry& StaticInputs(const data::BlockBatch& batch, const data::StepShape& shape, const std::vector<double>& scales);
  // Forward and loss on the entry's inputs into its outputs; with `backward`,
  // the loss back-propagated (autocast off) and undefined after.
  torch::Tensor Body(Entry& entry, bool backward);
  void RunOnCaptureStream(Entry& entry);  // warm-up, capture or replay; CUDA only

  model::SmithPretraining model_;
  dist::ProcessGroup& group_;
  const Options options_;
  const bool captures_;
  std::map<Key, std::unique_ptr<Entry>> entries_;
  int64_t graphs_ = 0, replays_ = 0;
  std::unique_ptr<GraphStream> cuda_;
};

// Contrastive fine-tuning's micro-step replayed from CUDA graphs (finetune
// --cuda-graphs, one rank, a model that takes step buckets: SMITH), one
// graph a bucket: the embedding pass of the chunk's sources, targets and
// hard negatives padded to its step bucket (DocumentModel::Pad), their ids
// and the loss's scale (1 / 2b queries, times the loop's 1/accumulation) are
// static inputs, copied in before each replay; forward, InfoNCE
// (ContrastiveSumsHere: no relation, so no --drop-related) and backward are
// captured, and the sums (loss, top-1, reciprocal ranks, and the learned
// temperature's log-scale) read back after, the step's one host sync. The
// key is the bucket's with the pair and hard-negative counts (a pair may
// draw fewer negatives than asked: each count is a graph of its own). As
// CapturedSmithSteps: gradients accumulate in place (the loop zeroes them),
// each bucket's first use runs eagerly, and without capture (`capture`
// false, or not on CUDA) the same body runs eagerly on the static inputs,
// its loss back-propagated by the loop.
class CapturedContrastiveSteps {
 public:
  // Captures on a CUDA device (each bucket's first use eager); elsewhere the
  // static inputs, eagerly.
  CapturedContrastiveSteps(model::DocumentModel& model, model::Temperature temperature, const torch::Device& device);
  ~CapturedContrastiveSteps();
  CapturedContrastiveSteps(const CapturedContrastiveSteps&) = delete;
  CapturedContrastiveSteps& operator=(const CapturedContrastiveSteps&) = delete;

  bool captures() const { return captures_; }
  // A micro-step on `chunk`'s pairs: Contrastive's value and parts ("infonce",
  // "top1", "mrr", and "temperature" when learned). `scale` as
  // CapturedSmithSteps::Step's.
  Objective Step(const PreparedChunk& chunk, double scale);

  int64_t inputs() const { return static_cast<int64_t>(entries_.size()); }  // static input sets (and graphs) made

 private:
  struct Entry;
  Entry& StaticInputs(const PreparedChunk& chunk, double scale);
  torch::Tensor Body(Entry& entry, bool backward);

  model::DocumentModel& model_;
  const model::Temperature temperature_;
  const torch::Device device_;
  const bool captures_;
  std::map<std::vector<int64_t>, std::unique_ptr<Entry>> entries_;
  int64_t graphs_ = 0, replays_ = 0;
  std::unique_ptr<GraphStream> cuda_;
};

// The update of a step whose micro-steps replay graphs, as one graph too:
// the gradients' global norm and clipping (sync-free foreach kernels),
// FusedAdamW's capturable step (its counts and learning rates in device
// tensors: FusedAdamW::MakeCapturable) and the gradients zeroed in place for
// the next step's graphs, which accumulate into them. Eager, that is about
// one kernel a parameter for the zeroing alone.
//
// Call it where the loop steps the optimizer: after the gradients are final
// and the learning rates set (SetLearningRate, which writes the lr tensors).
// The first `warmup_steps` updates run eagerly on the capture stream (the
// first makes the optimizer capturable, with the parameters that then have
// a gradient); the next is captured and every later one replayed. Every
// update must find the same parameters with a gradient, in the same memory
// (checked on the host before each: a gradient made, dropped or replaced
// since would be missed by the graph). Before a
// checkpoint saves the optimizer, SyncHostSteps brings its step counts back
// to the host. One rank, as the micro-steps' graphs; without capture (`capture`
// false, or not on CUDA) the same body runs eagerly, which the CPU tests check
// against the loop's eager update.
class CapturedOptimizerStep {
 public:
  struct Options {
    double max_grad_norm = 0;  // clip to this global norm; 0: only measure it
    bool capture = true;       // a graph on a CUDA device; false: the same body, eagerly
    int warmup_steps = 1;      // eager updates before the capture (at least 1)
  };
  // `clipped`: the parameters whose gradients' norm is clipped (the
  // module's); `trained`: every parameter the optimizer steps (those and any
  // beside them, a learned temperature), whose gradients are zeroed.
  CapturedOptimizerStep(FusedAdamW& optimizer, std::vector<torch::Tensor> clipped, std::vector<torch::Tensor> trained,
                        const torch::Device& device, Options options);
  ~CapturedOptimizerStep();
  CapturedOptimizerStep(const CapturedOptimizerStep&) = delete;
  CapturedOptimizerStep& operator=(const CapturedOptimizerStep&) = delete;

  bool captures() const { return captures_; }
  // Clips (or measures), steps and zeroes the gradients; returns the
  // gradients' global norm before clipping (a copy, on the device).
  torch::Tensor Step();
  // The optimizer's step counts back on the host, for its checkpoint.
  void SyncHostSteps();

  int64_t updates() const { return updates_; }
  int64_t replays() const { return replays_; }

 private:
  torch::Tensor Body();  // the update; returns the norm

  FusedAdamW& optimizer_;
  const std::vector<torch::Tensor> clipped_, trained_;
  const Options options_;
  const bool captures_;
  torch::Tensor norm_;                   // the last update's norm (the graph's output once captured)
  std::vector<const void*> gradients_;  // each parameter's gradient memory at the first update (null: none)
  int64_t updates_ = 0, replays_ = 0;
  std::unique_ptr<GraphStream> cuda_;
  struct Graph;  // the update's graph, once captured
  std::unique_ptr<Graph> graph_;
};

}  // namespace docmatch::train
