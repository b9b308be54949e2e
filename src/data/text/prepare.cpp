// `prepare` step by step: read and check documents, segment, train or load the
// tokenizer, encode on threads into shards, write manifest.json last (prepare.h).
#include "data/text/prepare.h"

#include <glog/logging.h>

#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <iomanip>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "console/error.h"
#include "console/interrupt.h"
#include "console/progress.h"
#include "data/corpus/corpus.h"
#include "data/text/corpus_reader.h"
#include "data/text/text.h"
#include "files/file_writer.h"

namespace docmatch::data {
namespace fs = std::filesystem;
namespace {

constexpr size_t kSampleIds = 5;
constexpr size_t kBatchDocuments = 32;  // documents handed to a worker at once
// A SentencePiece piece spans at most 16 characters (its default
// max_sentencepiece_length) of at most 4 bytes each, so text beyond 64 bytes
// per allowed token cannot reach the token cap: it is cut before segmentation,
// which bounds the work and memory an enormous document can cost.
constexpr int64_t kMaxBytesPerToken = 64;

// Cuts `text` to at most `max_bytes`, backing off to a UTF-8 character start.
bool TruncateUtf8(std::string* text, int64_t max_bytes) {
  if (static_cast<int64_t>(text->size()) <= max_bytes) return false;
  size_t end = static_cast<size_t>(max_bytes);
  while (end > 0 && (static_cast<unsigned char>((*text)[end]) & 0xC0) == 0x80) --end;
  text->resize(end);
  return true;
}

// The title as the text's first paragraph (PrepareOptions::title_in_text).
void PrependTitle(RawDocument* raw) {
  if (!raw->title.empty()) raw->text = raw->title + "\n\n" + raw->text;
}

// A document after UTF-8 policy and segmentation: paragraphs of sentences.
struct Segmented {
  RawDocument raw;
  std::vector<std::vector<std::string>> paragraphs;
  bool skipped_invalid = false;
  bool truncated = false;  // raw text cut at kMaxBytesPerToken * max tokens
};

Segmented Segment(RawDocument raw, const SentenceSegmenter& segmenter, InvalidUtf8Policy policy, int64_t max_tokens) {
  Segmented out;
  out.raw = std::move(raw);
  if (out.raw.invalid_utf8 > 0 && policy == InvalidUtf8Policy::kSkip) {
    out.skipped_invalid = true;
    return out;
  }
  out.truncated = TruncateUtf8(&out.raw.text, max_tokens * kMaxBytesPerToken);
  for (const std::string& paragraph : SplitParagraphs(out.raw.text)) {
    std::vector<std::string> sentences = segmenter.Split(paragraph);
    if (!sentences.empty()) out.paragraphs.push_back(std::move(sentences));
  }
  out.raw.text.clear();  // the sentences hold it now
  return out;
}

// What a worker returns for one input document.
struct Encoded {
  Document document;
  WordBag words;  // the words of the sentences kept, counted (word_counts.h)
  std::string origin;
  int invalid_utf8 = 0;
  bool skipped_invalid = false;
  bool truncated = false;
};

Encoded Encode(Segmented segmented, const Tokenizer& tokenizer, const WordSegmenter& word_segmenter,
               int64_t max_tokens) {
  Encoded out;
  out.origin = segmented.raw.origin;
  out.invalid_utf8 = segmented.raw.invalid_utf8;
  out.skipped_invalid = segmented.skipped_invalid;
  out.truncated = segmented.truncated;
  Document& d = out.document;
  d.id = std::move(segmented.raw.id);
  d.title = std::move(segmented.raw.title);
  d.sentence_offsets = {0};
  d.paragraph_offsets = {0};
  // `stop` is this loop's own flag: the raw-text cut above may already have
  // marked the document truncated, and every sentence up to the cap is kept.
  bool stop = false;
  std::vector<std::string> words;
  for (const auto& paragraph : segmented.paragraphs) {
    for (const std::string& sentence : paragraph) {
      std::vector<int32_t> ids = tokenizer.Encode(sentence);
      if (ids.empty()) continue;
      const int64_t room = max_tokens - d.num_tokens();
      if (static_cast<int64_t>(ids.size()) > room) {  // crosses the cap (room 0: starts at it)
        ids.resize(room);
        out.truncated = true;
        stop = true;
      }
      if (!ids.empty()) {
        d.tokens.insert(d.tokens.end(), ids.begin(), ids.end());
        d.sentence_offsets.push_back(d.num_tokens());
        // A sentence the cap cut keeps all its words: BM25 reads the text.
        word_segmenter.Split(sentence, &words);
      }
      if (stop) break;
    }
    if (d.sentence_offsets.size() - 1 > static_cast<size_t>(d.paragraph_offsets.back())) {
      d.paragraph_offsets.push_back(d.num_sentences());
    }
    if (stop) break;
  }
  out.words = CountWords(words);
  return out;
}

int ThreadCount(int requested) { return requested > 0 ? requested : std::max(1u, std::thread::hardware_concurrency()); }

// Checks ids for duplicates as documents are read, naming both places. Keeps
// only the id and its line (a folder's file names are unique already), so a
// 700K-document corpus costs tens of megabytes here, not its text.
class IdRegistry {
 public:
  explicit IdRegistry(std::string input) : input_(std::move(input)) {}
  void Add(const RawDocument& document) {
    const auto [it, inserted] = lines_.emplace(document.id, document.line);
    if (!inserted) {
      throw InputError(document.origin + ": duplicate document id \"" + document.id + "\" (first seen at " + input_ +
                       ":" + std::to_string(it->second) + "); ids must be unique");
    }
  }

 private:
  std::string input_;
  std::unordered_map<std::string, int64_t> lines_;
};

// Prepare writes into <output>/.incoming/ and moves the result into <output>
// only when it is complete: bad input, a crash or a full disk part-way leave
// an existing corpus as it was.
constexpr const char* kStagingFolder = ".incoming";

// Refuses to replace a corpus without --overwrite; returns an empty staging folder.
std::string StartOutput(const PrepareOptions& options) {
  fs::create_directories(options.output);
  if (fs::exists(fs::path(options.output) / kManifestFile) && !options.overwrite) {
    throw InputError("output '" + options.output + "' already holds a prepared corpus; pass --overwrite to replace it");
  }
  const fs::path staging = fs::path(options.output) / kStagingFolder;
  fs::remove_all(staging);  // a crashed run's leftovers
  fs::create_directories(staging);
  return staging.string();
}

// The staged corpus replaces the old one: its manifest goes first (a
// half-replaced folder must not look complete), the new manifest comes last.
void InstallStaged(const std::string& staging, const std::string& output) {
  fs::remove(fs::path(output) / kManifestFile);
  fs::remove(fs::path(output) / kSkippedFile);  // an earlier corpus's
  for (const auto& entry : fs::directory_iterator(output)) {
    if (entry.path().filename().string().rfind("shard-", 0) == 0) fs::remove(entry.path());
  }
  for (const auto& entry : fs::directory_iterator(staging)) {
    if (entry.path().filename() != kManifestFile) fs::rename(entry.path(), fs::path(output) / entry.path().filename());
  }
  fs::rename(fs::path(staging) / kManifestFile, fs::path(output) / kManifestFile);
  fs::remove_all(staging);
}

std::string ShardName(int64_t index) {
  std::ostringstream name;
  name << "shard-" << std::setw(5) << std::setfill('0') << index << ".h5";
  return name.str();
}

// Pass 1: segment everything once and train SentencePiece on the sentences.
Tokenizer TrainTokenizer(const PrepareOptions& options, int64_t total_documents, PrepareReport* report) {
  RawDocumentReader reader(options.input);
  SentenceSegmenter segmenter(options.locale);
  IdRegistry ids(options.input);  // fail on duplicates before spending time on training
  console::ProgressBar bar("[data] tokenizer sentences", total_documents, "docs", "sentences", options.progress);
  std::deque<std::string> pending;
  auto next_sentence = [&](std::string* sentence) {
    while (pending.empty()) {
      RawDocument raw;
      if (!reader.Next(&raw)) {
        if (!bar.finished()) {
          bar.Finish();
          LOG(INFO) << "[data] training a " << options.tokenizer.vocab_size << "-piece " << options.tokenizer.model_type
                    << " SentencePiece model on "
                    << std::min(report->tokenizer_sentences, options.tokenizer.max_sentences) << " of "
                    << report->tokenizer_sentences << " sentences";
        }
        return false;
      }
      ids.Add(raw);
      if (options.title_in_text) PrependTitle(&raw);
      Segmented segmented = Segment(std::move(raw), segmenter, options.invalid_utf8, options.max_document_tokens);
      int64_t count = 0;
      for (auto& paragraph : segmented.paragraphs) {
        for (auto& s : paragraph) pending.push_back(std::move(s));
        count += static_cast<int64_t>(paragraph.size());
      }
      bar.Add(1, count);
      console::StopIfInterrupted();
      report->tokenizer_sentences += count;
    }
    *sentence = std::move(pending.front());
    pending.pop_front();
    return true;
  };
  TokenizerTrainingOptions training = options.tokenizer;
  training.num_threads = ThreadCount(options.threads);
  const auto start = std::chrono::steady_clock::now();
  Tokenizer tokenizer = Tokenizer::Train(next_sentence, training, (fs::path(options.output) / kTokenizerFile).string());
  report->tokenizer_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  LOG(INFO) << "[data] trained a " << tokenizer.vocab_size() << "-piece " << training.model_type << " tokenizer in "
            << console::HumanDuration(report->tokenizer_seconds);
  return tokenizer;
}

}  // namespace

void PrepareReport::Count(const std::string& reason, const std::string& id) {
  Tally& tally = tallies[reason];
  ++tally.count;
  if (tally.sample_ids.size() < kSampleIds) tally.sample_ids.push_back(id);
}

nlohmann::json PrepareReport::ToJson() const {
  nlohmann::json tallies_json = nlohmann::json::object();
  for (const auto& [reason, tally] : tallies) {
    tallies_json[reason] = {{"count", tally.count}, {"sample_ids", tally.sample_ids}};
  }
  return {{"input_documents", input_documents},
          {"documents", totals.documents},
          {"paragraphs", totals.paragraphs},
          {"sentences", totals.sentences},
          {"tokens", totals.tokens},
          {"shards", shards},
          {"bytes_on_disk", bytes_on_disk},
          {"vocab_size", vocab_size},
          {"words", {{"file", kWordsFile}, {"distinct", words}}},
          {"tokenizer_trained", tokenizer_trained},
          {"tokenizer_sentences", tokenizer_sentences},
          {"tokenizer_seconds", tokenizer_seconds},
          {"encode_seconds", encode_seconds},
          {"total_seconds", total_seconds},
          {"documents_per_second", total_seconds > 0 ? totals.documents / total_seconds : 0.0},
          {"tokens_per_second", total_seconds > 0 ? totals.tokens / total_seconds : 0.0},
          {"skipped_or_changed", tallies_json}};
}

std::string PrepareReport::ToText() const {
  std::ostringstream out;
  out << "documents   " << totals.documents << " written of " << input_documents << " read\n"
      << "paragraphs  " << totals.paragraphs << "\n"
      << "sentences   " << totals.sentences << "\n"
      << "tokens      " << totals.tokens << " (vocabulary " << vocab_size
      << (tokenizer_trained ? ", trained here" : ", given") << ")\n"
      << "words       " << words << " distinct, for BM25 (" << kWordsFile << ")\n"
      << "shards      " << shards << ", " << console::HumanCount(static_cast<double>(bytes_on_disk)) << "B on disk\n"
      << "time        " << console::HumanDuration(total_seconds) << " ("
      << console::HumanCount(totals.documents / std::max(total_seconds, 1e-9)) << " docs/s, "
      << console::HumanCount(totals.tokens / std::max(total_seconds, 1e-9)) << " tokens/s)\n";
  static const std::map<std::string, std::string> kMeaning = {
      {"empty", "skipped: no text after segmentation"},
      {"invalid_utf8", "skipped: invalid UTF-8 (--invalid-utf8=skip)"},
      {"repaired_utf8", "kept: invalid UTF-8 replaced by U+FFFD"},
      {"truncated", "kept: truncated to --max-document-tokens"}};
  if (tallies.empty()) out << "skipped     none\n";
  for (const auto& [reason, tally] : tallies) {
    out << std::left << std::setw(14) << reason << tally.count << "  " << kMeaning.at(reason) << "; e.g.";
    for (const auto& id : tally.sample_ids) out << " \"" << id << "\"";
    out << "\n";
  }
  return out.str();
}

namespace {

// Prepare into options.output, which exists and is empty.
PrepareReport PrepareInto(const PrepareOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  PrepareReport report;
  RawDocumentReader reader(options.input);
  const int64_t total_documents = reader.CountDocuments();

  std::unique_ptr<Tokenizer> tokenizer;
  if (options.tokenizer_model.empty()) {
    tokenizer = std::make_unique<Tokenizer>(TrainTokenizer(options, total_documents, &report));
    report.tokenizer_trained = true;
  } else {
    tokenizer = std::make_unique<Tokenizer>(Tokenizer::Load(options.tokenizer_model));
    files::CopyFile(options.tokenizer_model, (fs::path(options.output) / TokenizerFileName(*tokenizer)).string());
  }
  report.vocab_size = tokenizer->vocab_size();

  // Pass 2: batches of documents go to workers; results come back in input
  // order (a queue of futures), so shards are deterministic whatever the threads.
  const int threads = ThreadCount(options.threads);
  const SentenceSegmenter prototype(options.locale);
  const WordSegmenter word_prototype(options.locale);
  const Tokenizer& tok = *tokenizer;
  auto work = [&](std::vector<RawDocument> batch) {
    SentenceSegmenter segmenter(prototype);  // ICU iterators are per thread
    WordSegmenter word_segmenter(word_prototype);
    std::vector<Encoded> encoded;
    encoded.reserve(batch.size());
    for (RawDocument& raw : batch) {
      if (options.title_in_text) PrependTitle(&raw);
      encoded.push_back(Encode(Segment(std::move(raw), segmenter, options.invalid_utf8, options.max_document_tokens),
                               tok, word_segmenter, options.max_document_tokens));
    }
    return encoded;
  };

  Manifest manifest;
  manifest.tokenizer_hash = tokenizer->hash();
  manifest.vocab_size = tokenizer->vocab_size();
  manifest.tokenizer_file = TokenizerFileName(*tokenizer);
  std::unique_ptr<ShardWriter> writer;
  WordCountsWriter word_writer((fs::path(options.output) / kWordsFile).string());
  auto close_shard = [&] {
    if (!writer) return;
    const ShardCounts counts = writer->Close();
    manifest.shards.push_back({fs::path(writer->path()).filename().string(), counts});
    report.bytes_on_disk += static_cast<int64_t>(fs::file_size(writer->path()));
    writer.reset();
  };
  console::ProgressBar bar("[data] encode", total_documents, "docs", "tokens", options.progress);
  std::string skipped_ids;  // kSkippedFile's lines: eval counts judgements of these documents as not found
  const auto skip = [&](const char* reason, const std::string& id) {
    report.Count(reason, id);
    skipped_ids += nlohmann::json{{"id", id}, {"reason", reason}}.dump() + "\n";
  };
  auto write = [&](std::vector<Encoded> batch) {
    int64_t tokens = 0;
    for (Encoded& e : batch) {
      ++report.input_documents;
      if (e.skipped_invalid) {
        skip("invalid_utf8", e.document.id);
        continue;
      }
      if (e.invalid_utf8 > 0) report.Count("repaired_utf8", e.document.id);
      if (e.document.num_tokens() == 0) {
        skip("empty", e.document.id);
        continue;
      }
      if (e.truncated) report.Count("truncated", e.document.id);
      if (!writer) {
        writer = std::make_unique<ShardWriter>((fs::path(options.output) / ShardName(manifest.shards.size())).string(),
                                               tokenizer->hash(), tokenizer->vocab_size());
      }
      writer->Add(e.document);
      word_writer.Add(e.words);
      tokens += e.document.num_tokens();
      report.totals.documents += 1;
      report.totals.paragraphs += e.document.num_paragraphs();
      report.totals.sentences += e.document.num_sentences();
      report.totals.tokens += e.document.num_tokens();
      if (writer->counts().documents == options.documents_per_shard) close_shard();
    }
    bar.Add(static_cast<int64_t>(batch.size()), tokens);
    console::StopIfInterrupted();
  };

  const auto encode_start = std::chrono::steady_clock::now();
  RawDocumentReader pass(options.input);
  IdRegistry ids(options.input);
  std::deque<std::future<std::vector<Encoded>>> in_flight;
  std::vector<RawDocument> batch;
  RawDocument raw;
  bool more = true;
  while (more) {
    more = pass.Next(&raw);
    if (more) {
      ids.Add(raw);
      batch.push_back(std::move(raw));
    }
    if (batch.size() == kBatchDocuments || (!more && !batch.empty())) {
      in_flight.push_back(std::async(std::launch::async, work, std::move(batch)));
      batch.clear();
    }
    // At most 2 batches per thread in flight: bounded memory, busy workers.
    while (!in_flight.empty() && (in_flight.size() >= static_cast<size_t>(2 * threads) || !more)) {
      write(in_flight.front().get());
      in_flight.pop_front();
    }
  }
  close_shard();
  word_writer.Close();
  report.words = word_writer.vocabulary_size();
  report.bytes_on_disk += static_cast<int64_t>(fs::file_size(fs::path(options.output) / kWordsFile));
  bar.Finish();
  report.encode_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - encode_start).count();
  report.shards = static_cast<int64_t>(manifest.shards.size());
  report.bytes_on_disk += static_cast<int64_t>(fs::file_size(fs::path(options.output) / manifest.tokenizer_file));
  report.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (report.totals.documents == 0) {
    // A corpus of nothing would replace a good one and leave every later
    // stage running on nothing without a word.
    std::string skipped;
    for (const auto& [reason, tally] : report.tallies) skipped += ", " + std::to_string(tally.count) + " " + reason;
    throw InputError("'" + options.input + "' gave no document to write (" + std::to_string(report.input_documents) +
                     " read" + skipped + "): no corpus written, and an existing one is left as it was");
  }
  if (!skipped_ids.empty()) {
    std::ofstream out(fs::path(options.output) / kSkippedFile, std::ios::binary);
    out << skipped_ids;
    if (!out.flush()) throw Error("data", "cannot write " + (fs::path(options.output) / kSkippedFile).string());
  }
  manifest.totals = report.totals;
  manifest.report = report.ToJson();
  manifest.Save(options.output);  // last: now the folder is a corpus
  return report;
}

}  // namespace

PrepareReport Prepare(const PrepareOptions& options) {
  if (options.documents_per_shard <= 0 || options.max_document_tokens <= 0) {
    throw Error("data", "--documents-per-shard (" + std::to_string(options.documents_per_shard) +
                            ") and --max-document-tokens (" + std::to_string(options.max_document_tokens) +
                            ") must be at least 1");
  }
  RawDocumentReader check(options.input);  // the input exists before the output is touched
  PrepareOptions staged = options;
  staged.output = StartOutput(options);
  PrepareReport report;
  try {
    report = PrepareInto(staged);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(staged.output, ignored);
    throw;
  }
  if (fs::exists(fs::path(options.output) / kManifestFile)) {
    // --overwrite with a smaller input is allowed (a subset on purpose) but said.
    try {
      const int64_t before = Manifest::Load(options.output).totals.documents;
      if (report.totals.documents < before) {
        LOG(WARNING) << "[data] '" << options.output << "' held " << before << " documents; the new corpus has "
                     << report.totals.documents << " (from '" << options.input << "')";
      }
    } catch (const std::exception&) {  // an old manifest that does not read: nothing to compare
    }
  }
  InstallStaged(staged.output, options.output);
  return report;
}

TextEncoder::TextEncoder(const Tokenizer& tokenizer, const std::string& locale, int64_t max_tokens)
    : tokenizer_(tokenizer), segmenter_(locale), word_segmenter_(locale), max_tokens_(max_tokens) {
  if (max_tokens <= 0) {
    throw Error("data", "--max-document-tokens must be at least 1, not " + std::to_string(max_tokens));
  }
}

Document TextEncoder::Encode(RawDocument raw, bool* truncated) const {
  WordBag ignored;
  return Encode(std::move(raw), &ignored, truncated);
}

Document TextEncoder::Encode(RawDocument raw, WordBag* words, bool* truncated) const {
  // Repaired, as the corpus reader does (a document from the reader already is).
  if (CountInvalidUtf8(raw.text) > 0) raw.text = RepairUtf8(raw.text);
  Encoded encoded = docmatch::data::Encode(Segment(std::move(raw), segmenter_, InvalidUtf8Policy::kRepair, max_tokens_),
                                           tokenizer_, word_segmenter_, max_tokens_);
  if (truncated) *truncated = encoded.truncated;
  *words = std::move(encoded.words);
  return std::move(encoded.document);
}

}  // namespace docmatch::data
