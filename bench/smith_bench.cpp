// SMITH on CPU: parameter counts, forward+backward time per document, and how
// many sentence blocks packing skips on a real corpus. One JSON line each.
//   smith_bench --model configs/models/smith-paper.yaml --corpus corpora/wikispeedia
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <iostream>

#include "data/batches/blocks.h"
#include "data/corpus/shard_stream.h"
#include "model/config.h"
#include "model/smith.h"

namespace {

int64_t Count(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

double Seconds(const std::chrono::steady_clock::time_point& start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"SMITH CPU benchmark (JSON lines on stdout)"};
  std::string model_path, corpus_dir;
  int64_t batch_size = 8;
  int steps = 3;
  app.add_option("--model", model_path, "model YAML (configs/models/)")->required()->check(CLI::ExistingFile);
  app.add_option("--corpus", corpus_dir, "prepared corpus for real documents")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--batch", batch_size, "documents per step")->capture_default_str();
  app.add_option("--steps", steps, "timed steps (after one warm-up)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto corpus = std::make_shared<const docmatch::data::Corpus>(corpus_dir);
  docmatch::model::SmithConfig config = docmatch::model::LoadModelConfig(model_path).smith;
  config.vocab_size = corpus->manifest().vocab_size;
  config.dropout = 0.0;
  const docmatch::data::BlockOptions blocks = config.Blocks();

  // Packing: blocks a naive implementation pads to (B x max_blocks, or B x the
  // batch's longest document) against the real blocks encoded.
  {
    docmatch::data::StreamOptions options;
    options.shuffle = false;
    docmatch::data::ShardStream stream(corpus, options);
    int64_t real = 0, padded_to_max = 0, padded_to_batch = 0, documents = 0, batch_longest = 0, in_batch = 0;
    while (auto d = stream.Next()) {
      const int64_t n = static_cast<int64_t>(docmatch::data::PackBlocks(*d, blocks).size());
      real += n;
      batch_longest = std::max(batch_longest, n);
      ++documents;
      if (++in_batch == batch_size) {
        padded_to_batch += in_batch * batch_longest;
        in_batch = batch_longest = 0;
      }
    }
    padded_to_batch += in_batch * batch_longest;
    padded_to_max = documents * config.max_blocks;
    std::cout << nlohmann::json{{"bench", "smith_packing"},
                                {"corpus", corpus_dir},
                                {"documents", documents},
                                {"batch", batch_size},
                                {"real_blocks", real},
                                {"slots_padded_to_max_blocks", padded_to_max},
                                {"slots_padded_to_batch_longest", padded_to_batch},
                                {"skipped_share_vs_max_blocks", 1.0 - static_cast<double>(real) / padded_to_max},
                                {"skipped_share_vs_batch_longest", 1.0 - static_cast<double>(real) / padded_to_batch}}
                     .dump()
              << std::endl;
  }

  // One batch of real documents, timed through the WP+SP pre-training loss.
  torch::manual_seed(0);
  docmatch::model::SmithPretraining model(docmatch::model::SmithEncoder(config), config);
  docmatch::data::StreamOptions options;
  docmatch::data::ShardStream stream(corpus, options);
  std::vector<docmatch::data::Document> docs;
  while (static_cast<int64_t>(docs.size()) < batch_size) docs.push_back(*stream.Next());
  std::vector<const docmatch::data::Document*> pointers;
  for (const auto& d : docs) pointers.push_back(&d);
  docmatch::data::MaskOptions masks;
  masks.vocab_size = config.vocab_size;
  const docmatch::data::BlockBatch batch = docmatch::data::BuildBlockBatch(pointers, blocks, &masks, 0);
  const docmatch::model::BlockTensors tensors = docmatch::model::ToTensors(batch, torch::kCPU);
  double total = 0;
  for (int step = 0; step <= steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    model->zero_grad();
    const auto [loss, lm, block] = model->Loss(tensors, /*sentence_blocks=*/true);
    loss.backward();
    if (step > 0) total += Seconds(start);
  }
  const double per_step = total / steps;
  int64_t real_blocks = 0;
  for (uint8_t m : batch.block_mask) real_blocks += m;
  std::cout << nlohmann::json{{"bench", "smith_step_cpu"},
                              {"model", model_path},
                              {"torch_threads", torch::get_num_threads()},
                              {"encoder_parameters", Count(*model->encoder)},
                              {"pretraining_parameters", Count(*model)},
                              {"batch", batch_size},
                              {"blocks_per_document", static_cast<double>(real_blocks) / batch_size},
                              {"real_tokens", batch.real_tokens},
                              {"forward_backward_seconds_per_step", per_step},
                              {"forward_backward_ms_per_document", 1000.0 * per_step / batch_size},
                              {"documents_per_second", batch_size / per_step},
                              {"tokens_per_second", batch.real_tokens / per_step}}
                   .dump()
            << std::endl;
  return 0;
}
