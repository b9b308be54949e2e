// The tiny SMITH the multi-rank tests train: 16 hidden, one layer a level,
// blocks of 8 tokens, up to 12 a document.
#pragma once

#include "model/smith.h"

namespace docmatch::testing {

inline model::SmithConfig TinySmith(double dropout = 0.0) {
  model::SmithConfig c;
  c.vocab_size = 1005;
  c.hidden = 16;
  c.heads = 2;
  c.intermediate = 32;
  c.sentence_layers = 1;
  c.document_layers = 1;
  c.block_length = 8;
  c.max_blocks = 12;
  c.dropout = dropout;
  return c;
}

}  // namespace docmatch::testing
