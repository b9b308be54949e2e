// docmatch's side of the SMITH pre-training step comparison (bench/peers/):
// one fixed batch of real documents (the corpus's first B, WP+SP masks of
// epoch 0), a seeded model, and N timed steps of forward (word LM + masked
// sentence blocks), backward, gradient clipping and AdamW, as `pretrain` runs
// them on one rank. --dump writes the batch, the initial weights and the
// config for the peer (bench/peers/smith_peer.py), which must reach the same
// first-step loss. Dropout is 0 on both sides, so that the math is the same.
// The process sets its host allocator as `docmatch` does (dist::
// ConfigureHostAllocator; DOCMATCH_HOST_ALLOCATOR=system for glibc's default).
//
//   smith_step --model configs/models/smith-tiny.yaml --corpus corpora/wikispeedia
//       --batch 8 --steps 10 --dump /tmp/step [--device cuda --precision bf16]
//
// --attention ab alternates steps between attention without padding and
// the padded grid (model::PackedAttention), both timed in one run.
//
// Prints one JSON line: step time, docs/s, real tokens/s, the host's time to
// make the step's input tensors (to_tensors_ms, outside the step), the losses; on
// CUDA with --sync-debug also the host synchronisations one more step makes,
// by the PyTorch operation that made them (the step's own loss.item() is one).
#ifdef DOCMATCH_HAS_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif
#include <c10/util/Backtrace.h>
#include <sys/resource.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "data/batches/blocks.h"
#include "data/corpus/corpus.h"
#include "data/text/tokenizer.h"
#include "dist/runtime.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/smith.h"
#include "model/transformer.h"
#include "train/autocast.h"
#include "train/optimizer.h"
#include "train/step_profiling.h"

using namespace docmatch;

namespace {

// Counts PyTorch's "called a synchronizing CUDA operation" warnings, each by
// the first ATen operation on its stack (at::native::..., or the frame's
// text where none is there).
class SyncCounter : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("synchroniz") == std::string::npos) return;
    const std::string trace = c10::get_backtrace(/*frames_to_skip=*/0, /*maximum_number_of_frames=*/40);
    std::string where = "unknown";
    for (const char* marker : {"at::native::", "at::_ops::", "c10::cuda::"}) {
      const size_t at = trace.find(marker);
      if (at == std::string::npos) continue;
      where = trace.substr(at, trace.find_first_of("( \n", at) - at);
      break;
    }
    ++by_operation[where];
  }
  std::map<std::string, int64_t> by_operation;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string host_allocator = dist::ConfigureHostAllocator();
  dist::QuietProfilerWithoutGpuDriver();
  CLI::App app{"SMITH pre-training step, docmatch's side of bench/peers (JSON on stdout)"};
  std::string model_path, corpus_dir, dump, profile, device_name = "cpu", precision = "fp32", attention = "auto";
  bool sync_debug = false;
  int64_t batch_size = 8, steps = 10, warmup = 2;
  app.add_option("--model", model_path, "model YAML (configs/models/)")->required()->check(CLI::ExistingFile);
  app.add_option("--corpus", corpus_dir, "prepared corpus")->required()->check(CLI::ExistingDirectory);
  app.add_option("--batch", batch_size, "documents in the batch")->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str();
  app.add_option("--device", device_name, "cpu or cuda")->capture_default_str();
  app.add_option("--precision", precision, "fp32, or bf16 (forward under autocast)")->capture_default_str();
  app.add_option("--attention", attention,
                 "auto, unpadded, padded (how the sentence blocks attend: model/transformer.h), or ab: "
                 "alternate steps between unpadded and padded and time each (step_ms_unpadded, step_ms_padded)")
      ->check(CLI::IsMember({"auto", "unpadded", "padded", "ab"}))
      ->capture_default_str();
  app.add_option("--profile", profile,
                 "after the timed steps, profile one more (Kineto: operators, and on CUDA kernels and "
                 "runtime calls) and write its Chrome trace here (bench/profile_table.py sums it)");
  app.add_flag("--sync-debug", sync_debug,
               "CUDA: count the host synchronisations of one more step, by operation (JSON key host_syncs)");
  app.add_option("--dump", dump, "folder for batch.safetensors, init.safetensors and config.json");
  CLI11_PARSE(app, argc, argv);

  const data::Corpus corpus(corpus_dir);
  model::SmithConfig config = model::LoadModelConfig(model_path).smith;
  config.vocab_size = corpus.manifest().vocab_size;
  config.dropout = 0.0;
  std::vector<data::Document> documents;
  for (int64_t i = 0; i < batch_size; ++i) documents.push_back(corpus.Get(i));
  std::vector<const data::Document*> pointers;
  for (const auto& d : documents) pointers.push_back(&d);
  const data::MaskOptions masks = data::PretrainingMasks(config.vocab_size, /*seed=*/1, /*sentence_blocks=*/true);
  const data::BlockBatch batch = data::BuildBlockBatch(pointers, config.Blocks(), &masks, /*epoch=*/0);
  // As pretrain sets its device: with an index, current, and attention's kernels chosen (dist::UseDevice).
  const torch::Device device = dist::ResolveDevice(torch::Device(device_name));
  dist::UseDevice(device);
  const model::BlockTensors tensors = model::ToTensors(batch, device);
  // The host's share of each step's input: the batch's tensors and its
  // layout (model::BlockLayout, made on the host), copied out without
  // waiting for the device. The trainer pays this on its own thread every step.
  double to_tensors_ms = 0;
  {
    constexpr int kRepeats = 50;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kRepeats; ++i) model::ToTensors(batch, device);
    to_tensors_ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kRepeats;
  }

  torch::manual_seed(1);
  model::SmithPretraining model(model::SmithEncoder(config), config);
  model->to(device);
  model->train();
  train::OptimizerOptions optimizer_options;
  optimizer_options.lr = 1e-4;
  std::unique_ptr<torch::optim::AdamW> optimizer = train::MakeAdamW(*model, optimizer_options);

  if (!dump.empty()) {
    std::filesystem::create_directories(dump);
    std::map<std::string, torch::Tensor> weights;
    for (const auto& p : model->named_parameters(true)) weights[p.key()] = p.value().detach().cpu().clone();
    io::WriteSafetensors(weights, dump + "/init.safetensors");
    io::WriteSafetensors({{"tokens", tensors.tokens.cpu()},
                          {"block_mask", tensors.block_mask.cpu()},
                          {"lm_labels", tensors.lm_labels.cpu()},
                          {"masked_blocks", torch::from_blob(const_cast<int64_t*>(batch.masked_blocks.data()),
                                                             {batch.B, batch.K}, torch::kInt64)
                                                .clone()}},
                         dump + "/batch.safetensors");
    nlohmann::json json = model::ModelConfigToJson({"smith", config, {}, {}, {}, {}});
    json["lr"] = optimizer_options.lr;
    json["weight_decay"] = optimizer_options.weight_decay;
    json["max_grad_norm"] = optimizer_options.max_grad_norm;
    std::ofstream(dump + "/config.json") << json.dump(2) << "\n";
  }

  auto train_step = [&] {
    optimizer->zero_grad();
    torch::Tensor total;
    {
      const train::Autocast autocast(device, train::ParsePrecision(precision));
      total = std::get<0>(model->Loss(tensors, /*sentence_blocks=*/true));
    }
    total.backward();
    train::ClipGradientNorm(model->parameters(), optimizer_options.max_grad_norm);
    optimizer->step();
    return total.item<double>();
  };
  std::vector<double> losses;
  double seconds = 0, seconds_by_layout[2] = {0, 0};  // [padded]
  const int64_t sides = attention == "ab" ? 2 : 1;
  for (int64_t step = 0; step < sides * (warmup + steps); ++step) {
    const bool padded = attention == "ab" && step % 2 == 1;
    model::UsePackedAttention(*model, model::ParsePackedAttention(
                                          attention != "ab" ? attention : padded ? "padded" : "unpadded"));
    const auto start = std::chrono::steady_clock::now();
    losses.push_back(train_step());
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step >= sides * warmup) {
      seconds += took;
      seconds_by_layout[padded] += took;
    }
  }
  if (attention == "ab") model::UsePackedAttention(*model, model::PackedAttention::kAuto);
  nlohmann::json host_syncs = nullptr;
#ifdef DOCMATCH_HAS_CUDA
  if (sync_debug && device.is_cuda()) {
    SyncCounter counter;
    c10::WarningUtils::WarningHandlerGuard guard(&counter);
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
    train_step();
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    host_syncs = counter.by_operation;
  }
#endif
  if (!profile.empty()) {  // one more step under the Kineto profiler, written as a Chrome trace
    train::StepProfiler profiler(/*first=*/1, /*last=*/1, profile, device);
    profiler.Begin(1);
    train_step();
    profiler.End(1);
  }
  const double step_s = seconds / static_cast<double>(sides * steps);
  nlohmann::json step_ms_unpadded = nullptr, step_ms_padded = nullptr;
  if (sides == 2) {
    step_ms_unpadded = 1e3 * seconds_by_layout[0] / static_cast<double>(steps);
    step_ms_padded = 1e3 * seconds_by_layout[1] / static_cast<double>(steps);
  }
  // The sentence blocks' padding: the share of the (real blocks x T) grid
  // that is not a real token, and the attention work the grid does (sum of
  // T^2 over the real blocks) against the real tokens' own (sum of l^2).
  const int64_t real_blocks = std::count(batch.block_mask.begin(), batch.block_mask.end(), 1);
  double grid_attention = 0, real_attention = 0, real_rows = 0;
  for (int64_t block = 0; block < batch.B * batch.S; ++block) {
    if (!batch.block_mask[block]) continue;
    int64_t length = 1;  // as the model's layout counts them: position 0 and every non-pad token
    for (int64_t t = 1; t < batch.T; ++t) length += batch.tokens[block * batch.T + t] != data::kPadId;
    grid_attention += static_cast<double>(batch.T * batch.T);
    real_attention += static_cast<double>(length * length);
    real_rows += static_cast<double>(length);
  }
  nlohmann::json peak_reserved_gib = nullptr;
  if (device.is_cuda()) peak_reserved_gib = train::PeakDeviceMemoryGiB(device);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::cout << nlohmann::json{{"side", "docmatch"},
                              {"model", model_path},
                              {"batch", batch_size},
                              {"real_blocks", real_blocks},
                              {"block_length", batch.T},
                              {"padding_fraction", 1.0 - real_rows / static_cast<double>(real_blocks * batch.T)},
                              {"attention_grid_over_real", grid_attention / real_attention},
                              {"attention", attention},
                              {"step_ms", 1e3 * step_s},
                              {"step_ms_unpadded", step_ms_unpadded},
                              {"step_ms_padded", step_ms_padded},
                              {"to_tensors_ms", to_tensors_ms},
                              {"docs_per_s", static_cast<double>(batch_size) / step_s},
                              {"tokens_per_s", static_cast<double>(batch.real_tokens) / step_s},
                              {"threads", at::get_num_threads()},
                              {"device", device.str()},
                              {"precision", precision},
                              {"host_allocator", host_allocator},
                              {"peak_reserved_gib", peak_reserved_gib},
                              {"peak_rss_mib", static_cast<double>(usage.ru_maxrss) / 1024.0},
                              {"host_syncs", host_syncs},
                              {"losses", losses}}
                   .dump()
            << std::endl;
  return 0;
}
