// `docmatch tokenize`: a tokenizer model applied to lines of text, one JSON
// array of ids (or pieces) per input line. For checking a vocabulary against
// another implementation, and for seeing what a model will read.
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "data/text/tokenizer.h"
#include "io/model_folder.h"

namespace docmatch::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer;
  bool pieces = false;
};

}  // namespace

Command AddTokenizeCommand(CLI::App* app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* sub = app->add_subcommand(
      "tokenize",
      "tokenize standard input, one line at a time, with a corpus's or an imported model's tokenizer\n"
      "  docmatch tokenize --tokenizer corpora/wiki < sentences.txt\n"
      "  echo 'Long documents, matched.' | docmatch tokenize --tokenizer models/minilm --pieces");
  sub->add_option("--tokenizer", options->tokenizer,
                  "a corpus folder, a model folder that carries a tokenizer (import, export), or a tokenizer file")
      ->required()
      ->check(CLI::ExistingPath);
  sub->add_flag("--pieces", options->pieces, "print the pieces instead of their ids");
  return {sub, [options] {
            const data::Tokenizer tokenizer = data::Tokenizer::Load(io::TokenizerFileOf(options->tokenizer));
            std::string line;
            while (std::getline(std::cin, line)) {
              const std::vector<int32_t> ids = tokenizer.Encode(line);
              nlohmann::json out = nlohmann::json::array();
              for (const int32_t id : ids) {
                if (options->pieces) {
                  out.push_back(tokenizer.IdToPiece(id));
                } else {
                  out.push_back(id);
                }
              }
              std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
            }
            return 0;
          }};
}

}  // namespace docmatch::cli
