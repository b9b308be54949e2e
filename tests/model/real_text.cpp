// Loading the GPL-3 text every Debian machine carries into a tiny corpus for the
// "training drives the loss down" tests (real_text.h).
#include "real_text.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "data/corpus/corpus.h"
#include "data/text/prepare.h"

namespace docmatch::model::testing {

RealText GplDocuments(const data::testing::ScratchDir& dir, int documents, int vocab_size) {
  const std::string source = "/usr/share/common-licenses/GPL-3";
  RealText out;
  if (!std::filesystem::exists(source)) return out;
  std::ifstream in(source);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string jsonl;
  const size_t part = text.size() / documents;
  for (int d = 0; d < documents; ++d) {
    jsonl += nlohmann::json{{"id", "gpl-" + std::to_string(d)}, {"text", text.substr(d * part, part)}}.dump() + "\n";
  }
  data::testing::WriteFile(dir.File("gpl.jsonl"), jsonl);
  data::PrepareOptions prepare;
  prepare.input = dir.File("gpl.jsonl");
  prepare.output = dir.File("gpl-corpus");
  prepare.tokenizer.vocab_size = vocab_size;
  prepare.progress = false;
  data::Prepare(prepare);
  const data::Corpus corpus(prepare.output);
  for (int64_t i = 0; i < corpus.num_documents(); ++i) out.documents.push_back(corpus.Get(i));
  out.vocab_size = corpus.manifest().vocab_size;
  return out;
}

}  // namespace docmatch::model::testing
