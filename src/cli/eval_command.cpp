// `docmatch eval`: classification and ranking metrics (eval/evaluate.h).
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/outputs.h"
#include "cli/training_flags.h"
#include "eval/evaluate.h"

namespace docmatch::cli {

Command AddEvalCommand(CLI::App* app) {
  CLI::App* sub = app->add_subcommand(
      "eval",
      "Evaluate a model folder: pair classification on --test-pairs with the threshold\n"
      "chosen on --valid-pairs (accuracy, precision, recall, F1), and ranking of every\n"
      "query of --relevance against the whole corpus (MRR, MRR@10, nDCG@10, MAP, P@1, P@10,\n"
      "recall@1/10/100, MPR, each as trec_eval defines it). --relevance reads JSONL lists,\n"
      "BEIR qrels (qrels/test.tsv, graded) or TREC qrels. Embeds the corpus first unless\n"
      "--embeddings names an `embed` file. Writes <output>/metrics.json (with\n"
      "--write-rankings K also rankings.jsonl and run.trec, a TREC run) and prints a\n"
      "table. Without --model, --embeddings may hold\n"
      "vectors made by anything else (a baseline, another library), in the corpus's\n"
      "document order, scored by cosine on the same pairs and lists.\n"
      "  docmatch eval --model checkpoints/smith-finetune/best --corpus corpora/manpages \\\n"
      "      --valid-pairs corpora/manpages/pairs.valid.jsonl --test-pairs corpora/manpages/pairs.test.jsonl \\\n"
      "      --relevance data/manpages/related.jsonl --output runs/eval\n"
      "  docmatch eval --embeddings runs/st/vectors.h5 --corpus corpora/wikispeedia ... --output runs/st\n"
      "With --queries (a corpus prepared with the same --tokenizer), the ranking's queries\n"
      "are that corpus's documents, each ranked against every document of --corpus (the\n"
      "candidates); TF-IDF weights then come from the candidates alone:\n"
      "  docmatch eval --model models/minilm --corpus corpora/docs --queries corpora/questions \\\n"
      "      --relevance questions-to-docs.jsonl --output runs/questions");
  auto o = std::make_shared<eval::EvalOptions>();
  auto flags = std::make_shared<DistributedFlags>();
  auto no_progress = std::make_shared<bool>(false);
  sub->add_option("--model", o->model, "model folder (leave out to score --embeddings made elsewhere by cosine)")
      ->check(ModelFolder());
  sub->add_option("--corpus", o->corpus, "prepared corpus folder")->required()->check(CLI::ExistingDirectory);
  sub->add_option("--embeddings", o->embeddings,
                  "an `embed` file of this model and corpus, or without --model vectors in corpus order from "
                  "anywhere (scripts/st-embed.py)")
      ->check(CLI::ExistingFile);
  sub->add_option("--valid-pairs", o->valid_pairs, "labelled pairs that choose the threshold")
      ->check(CLI::ExistingFile);
  sub->add_option("--test-pairs", o->test_pairs, "labelled pairs to classify")->check(CLI::ExistingFile);
  sub->add_option("--relevance", o->relevance,
                  "relevance judgements for ranking: JSONL ({\"query\", \"relevant\": [ids] or {id: grade}}, or "
                  "{\"source\", \"target\"} lines), BEIR qrels (query-id, corpus-id, score; tab-separated) or TREC "
                  "qrels (query 0 document grade); grade 1 or more is relevant, and nDCG's gain")
      ->check(CLI::ExistingFile);
  sub->add_option("--queries", o->queries,
                  "prepared corpus of the ranking's queries (same tokenizer as --corpus); the relevance file's "
                  "query ids are its documents, the relevant ids --corpus's")
      ->check(CLI::ExistingDirectory);
  sub->add_option("--query-embeddings", o->query_embeddings,
                  "an `embed` file of --queries (default: embedded into <output>/query-embeddings.h5; needed "
                  "without --model)")
      ->check(CLI::ExistingFile);
  sub->add_option("--write-rankings", o->write_rankings,
                  "keep each ranking query's top K as JSON lines in <output>/rankings.jsonl (query, relevant, "
                  "hits with id, score, relevant), e.g. for scripts/compare-rankings.py, and as a TREC run in "
                  "<output>/run.trec (query Q0 id rank score docmatch) for trec_eval, ranx or ir-measures")
      ->check(NonNegative());
  sub->add_option("--output", o->output, "folder for metrics.json (and embeddings.h5, query-embeddings.h5)")
      ->capture_default_str();
  sub->add_option("--threshold-objective", o->threshold_objective, "what the validation threshold maximises")
      ->capture_default_str()
      ->check(CLI::IsMember({"accuracy", "f1"}));
  sub->add_option("--max-queries", o->max_queries, "rank a seeded sample of this many queries (0 = all)")
      ->check(NonNegative())
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "query sample")->capture_default_str();
  sub->add_flag("--sdr-normalize,!--no-sdr-normalize", o->sdr_normalize,
                "SDR: z-score each source paragraph's scores over the candidates' paragraphs (the paper's step,\n"
                "on by default; the authors' public code leaves it out)");
  sub->add_option("--sdr-pair-pool", o->sdr_pair_pool,
                  "SDR pairs: a pair's target is z-scored among this many other documents (a fixed seeded\n"
                  "sample), so a score means the same for every pair; 0 scores each pair alone, where z-scores\n"
                  "degenerate (a one-paragraph target scores exactly 0)")
      ->check(NonNegative())
      ->capture_default_str();
  auto weight_text = std::make_shared<std::string>("0");
  CLI::Option* weight =
      sub->add_option("--lexical-weight", *weight_text,
                      "hybrid retrieval: score = (1 - w) x dense cosine + w x the lexical score (--lexical; 0 = dense "
                      "only, 1 = lexical only; with tfidf, 0.5 = the two unit vectors concatenated). Pairs and "
                      "ranking both use it. auto: the w of 0, 0.1, ..., 1 with the best MRR on a seeded half of the "
                      "ranking's queries, the ranking then measured on the other half")
          ->capture_default_str()
          ->check(LexicalWeight());
  sub->add_flag("--windows-mean", o->windows_mean,
                "a MaxSim file (match_bert maxsim): rank by the cosine of each document's vector, its windows' "
                "mean, instead of MaxSim");
  AddLexicalFlags(sub, weight, &o->lexical, &o->bm25);
  sub->add_option("--batch-size", o->batch_size, "documents per embedding pass")
      ->capture_default_str()
      ->check(Positive());
  AddDistributedFlags(sub, flags.get());
  sub->add_flag("--no-progress", *no_progress, "no progress bar");
  return {sub, [o, flags, no_progress, weight_text] {
            o->progress = !*no_progress;
            o->lexical_weight_auto = *weight_text == "auto";
            o->lexical_weight = o->lexical_weight_auto ? 0.0 : std::stod(*weight_text);
            if (o->relevance.empty() && o->valid_pairs.empty() && o->test_pairs.empty() && o->queries.empty()) {
              // Embedding alone, with a metrics.json of no metric, is `embed`'s work.
              std::cerr << "docmatch eval: error: nothing to score: give --relevance (ranking), --test-pairs or "
                           "--valid-pairs (pair classification); to write vectors only, use docmatch embed"
                        << std::endl;
              return 2;
            }
            // --embeddings may lie in the report folder: eval does not write over it.
            RefuseProtectedOutput("eval", o->output, {o->model, o->corpus, o->queries});
            return RunDistributed(*flags, [&](dist::ProcessGroup& group) {
              nlohmann::json metrics;
              WithMemoryAdvice("eval", o->batch_size, "a smaller --batch-size", [&] {
                metrics = eval::RunEvaluation(*o, group);
                return 0;
              });
              if (group.rank() == 0) {
                std::cout << eval::MetricsTable(metrics) << "[eval] " << o->output << "/metrics.json" << std::endl;
              }
              return 0;
            });
          }};
}

}  // namespace docmatch::cli
