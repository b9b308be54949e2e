// A tokenized document as the shards store it: flat tokens plus offsets.
//
// Sentence s spans tokens [sentence_offsets[s], sentence_offsets[s+1]);
// paragraph p spans sentences [paragraph_offsets[p], paragraph_offsets[p+1]).
// Offsets are relative to this document (the shards store them globally).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace docmatch::data {

struct Document {
  int64_t index = -1;                      // position in the corpus (0 .. documents-1)
  std::string id;                          // the corpus's own id, e.g. "Absolute_zero"
  std::string title;                       // optional; empty when the input had none
  std::vector<int32_t> tokens;             // (tokens,)
  std::vector<int64_t> sentence_offsets;   // (sentences + 1,) into tokens
  std::vector<int64_t> paragraph_offsets;  // (paragraphs + 1,) into sentences

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_sentences() const { return static_cast<int64_t>(sentence_offsets.size()) - 1; }
  int64_t num_paragraphs() const { return static_cast<int64_t>(paragraph_offsets.size()) - 1; }
  int64_t sentence_length(int64_t s) const { return sentence_offsets[s + 1] - sentence_offsets[s]; }

  // Tokens of sentence `s` (copy; samplers that care use the offsets).
  std::vector<int32_t> Sentence(int64_t s) const {
    return std::vector<int32_t>(tokens.begin() + sentence_offsets[s], tokens.begin() + sentence_offsets[s + 1]);
  }
};

}  // namespace docmatch::data
