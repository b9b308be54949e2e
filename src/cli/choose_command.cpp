// `docmatch choose`: the reader measured and chosen on the user's links (eval/choose.h).
#include <algorithm>
#include <csignal>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/outputs.h"
#include "cli/training_flags.h"
#include "console/interrupt.h"
#include "eval/choose.h"
#include "train/finetune.h"

namespace docmatch::cli {
namespace {

// "90", "90s", "30m", "2h" -> seconds.
double BudgetSeconds(const std::string& text) {
  size_t used = 0;
  double value = -1;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  const double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : -1;
  if (used == 0 || scale < 0 || value < 0) {
    throw CLI::ValidationError("--budget", "'" + text + "' is not a time: give seconds, or 30m, 2h");
  }
  return value * scale;
}

// Contrastive fine-tuning of the model on `pairs`: a fresh run, 10% of the
// steps warming up and linear decay to 0 at the last, checkpointed once at
// its end (the step reached when `max_seconds` runs out: the schedule is the
// whole run's, so a run cut short stops at a higher learning rate). A step
// takes at most the pairs there are.
eval::TunedModel FineTuneForChoose(const eval::ChooseOptions& o, const std::string& pairs, int64_t count,
                                   const std::string& run, double max_seconds, dist::ProcessGroup& group) {
  train::FinetuneOptions f;
  f.corpus = o.corpus;
  f.train_pairs = pairs;
  f.init = o.model;
  f.run = run;
  f.steps = o.finetune_steps;
  f.batch_size = std::min<int64_t>(o.finetune_batch_size, std::max<int64_t>(1, count / group.size()));
  // A batch of more pairs is embedded this many at a time (gradient caching:
  // the same loss and gradients up to dropout's draws, one chunk's
  // activations in memory), so a
  // large --finetune-batch-size does not outgrow the machine.
  constexpr int64_t kPairsInMemory = 32;
  f.grad_cache = f.batch_size > kPairsInMemory ? kPairsInMemory : 0;
  f.optimizer.lr = o.finetune_lr;
  f.optimizer.warmup_steps = std::max<int64_t>(1, o.finetune_steps / 10);
  f.optimizer.total_steps = o.finetune_steps;
  f.checkpoint_every = o.finetune_steps;
  f.keep_last = 1;
  f.validate_every = 0;
  f.seed = o.seed;
  f.resume = false;
  f.progress = o.progress;
  f.max_seconds = max_seconds;
  const train::LoopResult result = train::RunFinetuning(f, group);
  if (result.interrupted) throw console::Interrupted(SIGINT);
  return {run + "/step-" + std::to_string(result.step), result.step, result.out_of_time};
}

}  // namespace

Command AddChooseCommand(CLI::App* app) {
  CLI::App* sub = app->add_subcommand(
      "choose",
      "Which way of reading your documents finds their related ones best? Measured on\n"
      "your own links, not advised. The corpus is embedded once, as the vectors of up\n"
      "to --windows windows a document; from them come the first window, the windows'\n"
      "mean (what SMITH's untrained combine computes), their max and MaxSim (late\n"
      "interaction), beside TF-IDF and BM25 and every fusion of two or three of them.\n"
      "Half of the --relevance queries (seeded) choose each fusion's weight; the other\n"
      "half measure every row's MRR with paired bootstrap intervals against the best.\n"
      "The best (or with --prefer cheapest the cheapest row within its interval) is\n"
      "written as model folders and the commands that embed, evaluate, search and\n"
      "export with it (<output>/recipe.sh). Without labels, a proxy (each\n"
      "document's first half of windows finding its second half) ranks the readers\n"
      "too, and the table says whether it picks what your links pick. With\n"
      "--finetune N the model is also trained for up to N steps on the choosing\n"
      "half's links (within --budget) and its readers join the table.\n"
      "  docmatch choose --model models/minilm --corpus corpora/mine \\\n"
      "      --relevance data/mine/related.jsonl --output runs/choose\n"
      "Rows: <output>/choice.json; each row's ranks: <output>/rankings/ (for\n"
      "scripts/compare-rankings.py). A second run into the same --output with the\n"
      "same model, corpus and --windows reads the first one's windows instead of\n"
      "embedding again (to try --prefer, --seed or --max-queries in seconds).");
  auto o = std::make_shared<eval::ChooseOptions>();
  auto flags = std::make_shared<DistributedFlags>();
  auto no_progress = std::make_shared<bool>(false);
  auto budget = std::make_shared<std::string>("0");
  sub->add_option("--model", o->model, "a flat model folder (import-hf output, e.g. models/minilm)")
      ->required()
      ->check(ModelFolder());
  sub->add_option("--corpus", o->corpus, "prepared corpus folder (the model's tokenizer)")
      ->required()
      ->check(CLI::ExistingDirectory);
  sub->add_option("--relevance", o->relevance,
                  "related documents of the corpus: {\"source\", \"target\"} lines (related.jsonl), {\"query\", "
                  "\"relevant\"} lines, BEIR or TREC qrels; queries are documents of the corpus")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--output", o->output, "folder for choice.json, rankings/, models/ and recipe.sh")
      ->capture_default_str();
  sub->add_option("--windows", o->windows, "windows of the model's max_tokens read per document")
      ->capture_default_str()
      ->check(Positive());
  sub->add_option("--max-queries", o->max_queries, "a seeded sample of this many queries (0 = all)")
      ->capture_default_str()
      ->check(NonNegative());
  sub->add_option("--seed", o->seed, "the queries' split and sample, the bootstrap's draws")->capture_default_str();
  sub->add_option("--resamples", o->resamples, "bootstrap resamples")->capture_default_str()->check(NonNegative());
  sub->add_option("--proxy-documents", o->proxy_documents,
                  "label-free proxy: documents whose halves are matched (0 = all with two windows or more)")
      ->capture_default_str()
      ->check(NonNegative());
  sub->add_option("--budget", *budget,
                  "time allowed (90, 90s, 30m, 2h; 0 = no limit): after the embedding pass, the fusions of two "
                  "readers with TF-IDF and the proxy run only while it lasts, and the table names what did not")
      ->capture_default_str();
  sub->add_option("--prefer", o->prefer,
                  "the row whose recipe is written: best (the highest MRR) or cheapest (of the rows within the "
                  "best's interval, the fewest windows a document to embed)")
      ->capture_default_str()
      ->check(CLI::IsMember({"best", "cheapest"}));
  sub->add_option("--batch-size", o->batch_size, "documents per embedding pass")
      ->capture_default_str()
      ->check(Positive());
  sub->add_option("--finetune", o->finetune_steps,
                  "also fine-tune the model on the choosing half's related pairs for at most this many steps "
                  "(fewer when --budget runs out), embed again and measure its readers beside the rest (0 = no)")
      ->capture_default_str()
      ->check(NonNegative());
  sub->add_option("--finetune-batch-size", o->finetune_batch_size, "related pairs a fine-tuning step (above 32, embedded 32 at a time: the "
                  "same step up to dropout's draws, in the memory of 32)")
      ->capture_default_str()
      ->check(Positive());
  sub->add_option("--finetune-lr", o->finetune_lr, "fine-tuning's peak learning rate (10% warm-up, linear decay)")
      ->capture_default_str();
  AddDistributedFlags(sub, flags.get());
  sub->add_flag("--no-progress", *no_progress, "no progress bar");
  return {sub, [o, flags, no_progress, budget] {
            o->progress = !*no_progress;
            o->budget_seconds = BudgetSeconds(*budget);
            RefuseProtectedOutput("choose", o->output, {o->model, o->corpus, o->relevance});
            return RunDistributed(*flags, [&](dist::ProcessGroup& group) {
              nlohmann::json choice;
              WithMemoryAdvice("choose", o->batch_size, "a smaller --batch-size", [&] {
                choice = eval::RunChoose(*o, group, [&](const std::string& pairs, int64_t count,
                                                        const std::string& run, double max_seconds) {
                  return FineTuneForChoose(*o, pairs, count, run, max_seconds, group);
                });
                return 0;
              });
              if (group.rank() == 0) std::cout << eval::ChoiceTable(choice) << std::flush;
              return 0;
            });
          }};
}

}  // namespace docmatch::cli
