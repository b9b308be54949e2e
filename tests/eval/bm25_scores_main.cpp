// bm25_scores CORPUS K1 B: every document of a prepared corpus as a BM25
// query against every document (eval/bm25.h), as JSON {"ids": [...],
// "scores": [[...], ...]} on stdout, for bm25_check.py to hold against a
// reference implementation.
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "data/corpus/corpus.h"
#include "data/corpus/word_counts.h"
#include "eval/bm25.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: bm25_scores CORPUS K1 B\n";
    return 2;
  }
  const docmatch::data::Corpus corpus(argv[1]);
  auto words = std::make_shared<const docmatch::data::WordCounts>(
      docmatch::data::WordCounts::OfCorpus(corpus.directory(), corpus.num_documents()));
  const docmatch::eval::Bm25Index index(words, {std::stod(argv[2]), std::stod(argv[3])});
  std::vector<int64_t> all(corpus.num_documents());
  for (int64_t i = 0; i < corpus.num_documents(); ++i) all[i] = i;
  const torch::Tensor scores = index.Scores(all).contiguous();
  nlohmann::json out = {{"ids", nlohmann::json::array()}, {"scores", nlohmann::json::array()}};
  for (int64_t i = 0; i < corpus.num_documents(); ++i) {
    out["ids"].push_back(corpus.Get(i).id);
    const double* row = scores[i].data_ptr<double>();
    out["scores"].push_back(std::vector<double>(row, row + corpus.num_documents()));
  }
  std::cout << std::setprecision(17) << out.dump() << "\n";
  return 0;
}
