// Training, loading and applying the corpus tokenizer (SentencePiece or
// WordPiece) with docmatch's reserved ids 0-4 (tokenizer.h).
#include "data/text/tokenizer.h"

#include "console/error.h"
#include "data/text/wordpiece.h"

#include <glog/logging.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "files/file_writer.h"

namespace docmatch::data {
namespace {

// Feeds the trainer from a callback, so the corpus is never held in memory.
class CallbackSentenceIterator : public sentencepiece::SentenceIterator {
 public:
  explicit CallbackSentenceIterator(const std::function<bool(std::string*)>& next) : next_(next) { Next(); }
  bool done() const override { return done_; }
  void Next() override { done_ = !next_(&value_); }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

 private:
  const std::function<bool(std::string*)>& next_;
  std::string value_;
  bool done_ = false;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open tokenizer model '" + path + "'");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace

std::string Fnv1a64Hex(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
  return hex;
}

Tokenizer::Tokenizer(std::string serialized, const std::string& origin)
    : serialized_(std::move(serialized)), hash_(Fnv1a64Hex(serialized_)) {
  if (WordPiece::IsModelFile(serialized_)) {
    wordpiece_ = std::make_unique<WordPiece>(WordPiece::Parse(serialized_, origin));
    const std::pair<int32_t, const char*> reserved[] = {
        {kPadId, "[PAD]"}, {kUnkId, "[UNK]"}, {kClsId, "[CLS]"}, {kSepId, "[SEP]"}, {kMaskId, "[MASK]"}};
    for (const auto& [id, piece] : reserved) {
      if (wordpiece_->vocab_size() <= id || wordpiece_->Piece(id) != piece) {
        throw std::runtime_error("WordPiece model '" + origin + "' does not hold " + piece + " at id " +
                                 std::to_string(id) + " (write it with `docmatch import-hf`)");
      }
    }
    return;
  }
  processor_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = processor_->LoadFromSerializedProto(serialized_);
  if (!status.ok()) {
    throw std::runtime_error("'" + origin + "' is not a SentencePiece model: " + status.ToString());
  }
  const std::pair<int32_t, const char*> reserved[] = {
      {kPadId, "[PAD]"}, {kClsId, "[CLS]"}, {kSepId, "[SEP]"}, {kMaskId, "[MASK]"}};
  for (const auto& [id, piece] : reserved) {
    if (processor_->GetPieceSize() <= id || processor_->IdToPiece(id) != piece) {
      throw std::runtime_error("tokenizer '" + origin + "' does not reserve id " + std::to_string(id) + " for " +
                               piece +
                               "; docmatch needs [PAD]=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4 "
                               "(let `docmatch prepare` train one, or train with --pad_id=0 "
                               "--unk_id=1 --bos_id=-1 --eos_id=-1 --pad_piece=[PAD] "
                               "--control_symbols=[CLS],[SEP],[MASK])");
    }
  }
  if (processor_->unk_id() != kUnkId) {
    throw std::runtime_error("tokenizer '" + origin + "' has <unk> at id " + std::to_string(processor_->unk_id()) +
                             ", docmatch needs it at 1");
  }
}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::Load(const std::string& model_path) { return Tokenizer(ReadFile(model_path), model_path); }

Tokenizer Tokenizer::SaveWordPiece(const WordPiece& wordpiece, const std::string& model_path) {
  std::string serialized = wordpiece.Serialize();
  files::ReplaceFile(model_path, serialized);
  return Tokenizer(std::move(serialized), model_path);
}

Tokenizer Tokenizer::Train(const std::function<bool(std::string*)>& next_sentence,
                           const TokenizerTrainingOptions& options, const std::string& model_path) {
  const std::unordered_map<std::string, std::string> arguments = {
      {"model_type", options.model_type},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"character_coverage", std::to_string(options.character_coverage)},
      {"num_threads", std::to_string(options.num_threads)},
      {"input_sentence_size", std::to_string(options.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", "16384"},
      // A small corpus may not support the requested size: take what it has.
      {"hard_vocab_limit", "false"},
      {"pad_id", std::to_string(kPadId)},
      {"unk_id", std::to_string(kUnkId)},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"pad_piece", "[PAD]"},
      {"control_symbols", "[CLS],[SEP],[MASK]"},
      {"minloglevel", "1"},
  };
  CallbackSentenceIterator iterator(next_sentence);
  std::string serialized;
  const auto status = sentencepiece::SentencePieceTrainer::Train(arguments, &iterator, &serialized);
  if (!status.ok()) throw std::runtime_error("SentencePiece training failed: " + status.ToString());
  files::ReplaceFile(model_path, serialized);
  return Tokenizer(std::move(serialized), model_path);
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text) const {
  if (wordpiece_) return wordpiece_->Encode(text);
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  if (!status.ok()) throw Error("data", "SentencePiece could not encode a text: " + status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  if (wordpiece_) return wordpiece_->Decode(ids);
  std::string text;
  const auto status = processor_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!status.ok()) throw Error("data", "SentencePiece could not decode ids: " + status.ToString());
  return text;
}

std::string Tokenizer::IdToPiece(int32_t id) const {
  return wordpiece_ ? wordpiece_->Piece(id) : processor_->IdToPiece(id);
}

int Tokenizer::vocab_size() const { return wordpiece_ ? wordpiece_->vocab_size() : processor_->GetPieceSize(); }

const char* Tokenizer::kind() const { return wordpiece_ ? "wordpiece" : "sentencepiece"; }

std::string TokenizerFileName(const Tokenizer& tokenizer) {
  return std::string(tokenizer.kind()) == "wordpiece" ? kWordPieceFile : "tokenizer.model";
}

}  // namespace docmatch::data
