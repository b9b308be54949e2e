// `docmatch import-hf`: a Hugging Face BERT-family folder as a docmatch model
// folder (io/import_hf.h).
#include <cstdlib>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/outputs.h"
#include "cli/training_flags.h"
#include "io/import_hf.h"

namespace docmatch::cli {

Command AddImportCommand(CLI::App* app) {
  auto o = std::make_shared<io::ImportOptions>();
  CLI::App* sub = app->add_subcommand(
      "import-hf",
      "Import a Hugging Face BERT-family model folder (config.json, model.safetensors,\n"
      "vocab.txt) as a docmatch model folder: MatchBERT's flat encoder, SMITH's sentence\n"
      "encoder or SDR's sentence encoder carries the weights, tokenizer.wordpiece the\n"
      "WordPiece vocabulary.\n"
      "Prepare a corpus with that tokenizer, then finetune --init / embed / eval it.\n"
      "  scripts/fetch-models.py all-minilm-l6-v2\n"
      "  docmatch import-hf ~/.cache/docmatch/models/all-minilm-l6-v2 --output models/minilm\n"
      "  docmatch prepare --input articles.jsonl --output corpora/wiki-wp --tokenizer models/minilm\n"
      "  docmatch import-hf ~/.cache/docmatch/models/all-minilm-l6-v2 --kind smith --block-length 128 \\\n"
      "      --max-blocks 4 --output models/smith-short\n"
      "  docmatch import-hf ~/.cache/docmatch/models/all-minilm-l6-v2 --kind sdr --output models/sdr-minilm\n"
      "  docmatch pretrain --objective sdr --init models/sdr-minilm --corpus corpora/wiki-wp --run runs/sdr\n"
      "  docmatch import-hf ~/.cache/docmatch/models/all-minilm-l6-v2 --kind bag --output models/bag-minilm\n"
      "Anything docmatch's BERT layer cannot reproduce exactly (another model_type, tanh GELU,\n"
      "relative positions) is refused; import.json lists the tensors mapped, dropped and fresh.");
  sub->add_option("input", o->input,
                  "Hugging Face model folder: a sentence-transformers or transformers folder, a hub cache folder "
                  "(models--org--name or its snapshots/<hash>), or a hub id (org/name) already in the local "
                  "Hugging Face cache; docmatch downloads nothing")
      ->required();
  sub->add_option("--output", o->output, "docmatch model folder to write")->required();
  sub->add_option("--kind", o->kind,
                  "match_bert (flat encoder), smith (SMITH's sentence encoder), sdr (SDR's sentence encoder)\n"
                  "or bag (the word embeddings alone, averaged over a document: the bag-of-embeddings baseline)")
      ->check(CLI::IsMember(io::ImportKinds()))
      ->capture_default_str();
  sub->add_option("--lowercase", o->lowercase, "lower-case text: auto reads tokenizer_config.json")
      ->check(CLI::IsMember({"auto", "true", "false"}))
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "seed of the layers the checkpoint does not have")->capture_default_str();
  sub->add_option("--dropout", o->dropout, "dropout of the docmatch model")
      ->check(InRange(0, 1))
      ->capture_default_str();
  sub->add_option("--max-tokens", o->max_tokens,
                  "match_bert: tokens per window, [CLS] and [SEP] included (0: the model's max_seq_length);\n"
                  "sdr: tokens per sentence, [CLS] and [SEP] included (0: 128);\n"
                  "bag: tokens of a document averaged (0: 4096)")
      ->check(CLI::Validator(
          [](const std::string& text) {
            const long long value = std::strtoll(text.c_str(), nullptr, 10);
            return value == 0 || value >= 3 ? std::string()
                                            : "must be 0 (the checkpoint's) or at least 3 ([CLS], [SEP] and a word)";
          },
          "0 or >= 3"))
      ->capture_default_str();
  sub->add_option("--pooling", o->pooling,
                  "match_bert: auto (from 1_Pooling), cls or mean;\n"
                  "smith: of each block (auto: mean for a mean-pooled checkpoint such as MiniLM, so a block\n"
                  "vector is the checkpoint's own sentence vector; cls: the paper's [CLS], dense, ReLU, fresh)")
      ->check(CLI::IsMember({"auto", "cls", "mean"}))
      ->capture_default_str();
  sub->add_option("--chunks", o->chunks, "match_bert: windows per document, vectors averaged")
      ->check(Positive())
      ->capture_default_str();
  sub->add_option("--window-pooling", o->window_pooling,
                  "match_bert with --chunks > 1: how the windows' vectors become one: mean, max, attention\n"
                  "(a learned layer that starts as the mean and learns which windows count), or maxsim (every\n"
                  "window's vector kept; eval and search score two documents by late interaction: each query\n"
                  "window's best cosine with the candidate's windows, averaged; one vector where one is needed:\n"
                  "the mean). For a whole long document give --chunks its windows, e.g. 512 (130,000 tokens)")
      ->check(CLI::IsMember({"mean", "max", "attention", "maxsim"}))
      ->capture_default_str();
  sub->add_option("--block-length", o->block_length, "smith: tokens per block, [CLS] and [SEP] included")
      ->check(AtLeast(3, "[CLS], [SEP] and a word"))
      ->capture_default_str();
  sub->add_option("--max-blocks", o->max_blocks, "smith: blocks per document")
      ->check(AtLeast(1, "one block a document"))
      ->capture_default_str();
  sub->add_option("--document-layers", o->document_layers, "smith: document transformer layers (fresh)")
      ->check(AtLeast(0, "0: the blocks' own vectors alone"))
      ->capture_default_str();
  sub->add_option("--combine", o->combine,
                  "smith: residual (the document vector starts as the mean of the block vectors: step 0 is the\n"
                  "checkpoint's windows averaged, the document layers learn what they add) or the paper's\n"
                  "normal | sum_concat | mean_concat | attention (fresh layers decide the vector from step 0)")
      ->check(CLI::IsMember({"residual", "normal", "sum_concat", "mean_concat", "attention"}))
      ->capture_default_str();
  sub->add_flag("--overwrite", o->overwrite, "replace an existing output folder");
  return {sub, [o] {
            std::string said;
            o->input = io::ResolveHuggingFaceFolder(o->input, &said);
            if (!said.empty()) std::cout << said << std::endl;
            RefuseProtectedOutput("import", o->output, {o->input});
            const io::ImportReport report = io::ImportHuggingFace(*o);
            std::cout << "[import] " << o->input << " -> " << o->output << ": " << report.mapped_tensors << " tensors ("
                      << report.mapped_parameters << " parameters) mapped, " << report.dropped.size() << " dropped, "
                      << report.fresh.size() << " fresh, " << report.moved_ids.size() << " token ids moved"
                      << std::endl;
            return 0;
          }};
}

}  // namespace docmatch::cli
