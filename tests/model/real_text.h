// A tiny real corpus for the "training drives the loss down" tests: the GPL
// text that every Debian machine carries (/usr/share/common-licenses/GPL-3),
// cut into documents and run through `prepare` with a small tokenizer.
#pragma once

#include <string>
#include <vector>

#include "../data/test_corpus.h"
#include "data/corpus/document.h"

namespace docmatch::model::testing {

struct RealText {
  std::vector<data::Document> documents;  // empty when the GPL text is absent
  int64_t vocab_size = 0;
};

RealText GplDocuments(const data::testing::ScratchDir& dir, int documents, int vocab_size = 300);

}  // namespace docmatch::model::testing
