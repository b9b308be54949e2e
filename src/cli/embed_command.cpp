// `docmatch embed`: every document's vector to HDF5, and `docmatch fuse`:
// several such files as one (eval/embeddings.h).
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "cli/outputs.h"
#include "cli/training_flags.h"
#include "console/error.h"
#include "eval/embeddings.h"

namespace docmatch::cli {

Command AddEmbedCommand(CLI::App* app) {
  CLI::App* sub = app->add_subcommand(
      "embed",
      "Embed every document of a corpus with a model folder (a checkpoint, <run>/best\n"
      "or an export) into one HDF5 file: document_ids, vectors (and for SDR the\n"
      "sentence vectors with their paragraphs). Under mpirun each rank embeds its\n"
      "share; rank 0 joins them.\n"
      "  docmatch embed --model checkpoints/smith-finetune/best --corpus corpora/manpages --output vectors.h5");
  auto o = std::make_shared<eval::EmbedOptions>();
  auto flags = std::make_shared<DistributedFlags>();
  auto no_progress = std::make_shared<bool>(false);
  auto overwrite = std::make_shared<bool>(false);
  sub->add_option("--model", o->model, "model folder")->required()->check(ModelFolder());
  sub->add_option("--corpus", o->corpus, "prepared corpus folder")->required()->check(CLI::ExistingDirectory);
  sub->add_option("--output", o->output, "HDF5 file to write")->required();
  sub->add_option("--batch-size", o->batch_size, "documents per forward pass")
      ->capture_default_str()
      ->check(Positive());
  AddDistributedFlags(sub, flags.get());
  sub->add_flag("--no-progress", *no_progress, "no progress bar");
  sub->add_flag("--overwrite", *overwrite, "replace an existing --output");
  return {sub, [o, flags, no_progress, overwrite] {
            o->progress = !*no_progress;
            RefuseProtectedOutput("embed", o->output, {o->model, o->corpus});
            if (std::filesystem::exists(o->output) && !*overwrite) {
              throw Error("embed", "'" + o->output + "' exists; pass --overwrite to replace it");
            }
            return RunDistributed(*flags, [&](dist::ProcessGroup& group) {
              const int64_t n = WithMemoryAdvice("embed", o->batch_size, "a smaller --batch-size",
                                                 [&] { return eval::RunEmbedding(*o, group); });
              if (group.rank() == 0) std::cout << "[embed] " << n << " documents -> " << o->output << std::endl;
              return 0;
            });
          }};
}

Command AddFuseCommand(CLI::App* app) {
  CLI::App* sub = app->add_subcommand(
      "fuse",
      "Fuse the vectors of two or more models into one embeddings file, in which\n"
      "the cosine of two documents is the weighted mean of their cosines under the\n"
      "inputs: e.g. a flat model's first 256 tokens with SMITH's whole document. Each\n"
      "file's rows are scaled to unit length and by sqrt(weight / sum of weights),\n"
      "side by side. The inputs must hold the same documents (rows follow the first\n"
      "file). eval reads the result without --model (--lexical-weight adds TF-IDF);\n"
      "search reads it by --id. SDR files enter by the cosine of their mean sentence\n"
      "vectors (not SDR's hierarchical score); SMASH files cannot be fused. Fusing\n"
      "is a choice per corpus (docs/RESULTS.md: it pays on Wikipedia, not on the\n"
      "manual pages); choose it and the weights on one half of your queries and\n"
      "measure on the other (scripts/compare-rankings.py --half 1, then --half 2).\n"
      "  docmatch fuse --embeddings runs/flat/embeddings.h5 --embeddings runs/smith/embeddings.h5 \\\n"
      "      --output runs/flat+smith.h5\n"
      "  docmatch eval --embeddings runs/flat+smith.h5 --corpus corpora/wiki --relevance relevance.jsonl \\\n"
      "      --lexical-weight 0.5 --output runs/eval-flat+smith-hybrid");
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto weights = std::make_shared<std::vector<double>>();
  auto output = std::make_shared<std::string>();
  auto overwrite = std::make_shared<bool>(false);
  sub->add_option("--embeddings", *inputs, "an embeddings file (embed, eval); two or more, repeated")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--weight", *weights, "one weight per --embeddings file, in order (default: 1 each)");
  sub->add_option("--output", *output, "HDF5 file to write")->required();
  sub->add_flag("--overwrite", *overwrite, "replace an existing --output");
  return {sub, [inputs, weights, output, overwrite] {
            RefuseProtectedOutput("fuse", *output, *inputs);
            if (std::filesystem::exists(*output) && !*overwrite) {
              throw Error("fuse", "'" + *output + "' exists; pass --overwrite to replace it");
            }
            const int64_t n = eval::FuseEmbeddings(*inputs, *weights, *output);
            std::cout << "[fuse] " << n << " documents, " << inputs->size() << " files -> " << *output << std::endl;
            return 0;
          }};
}

}  // namespace docmatch::cli
