// `embed`: each rank encodes its contiguous share into a part file, rank 0 joins
// the parts in order into the final HDF5 (embeddings.h).
#include "eval/embeddings.h"

#include <glog/logging.h>

#include <cmath>
#include <filesystem>
#include <optional>

#include "console/error.h"
#include "console/interrupt.h"
#include "console/progress.h"
#include "data/corpus/hdf5_util.h"
#include "files/lock_file.h"
#include "io/model_folder.h"

namespace docmatch::eval {
namespace fs = std::filesystem;
namespace hdf5 = data::hdf5;
namespace {

constexpr const char* kFormat = "docmatch-embeddings";
constexpr int64_t kVersion = 1;
constexpr hsize_t kChunkRows = 1024;
constexpr int64_t kCopyRows = 1 << 14;  // rows per block when joining parts

std::string Where(const std::string& path) { return "[embed] embeddings '" + path + "'"; }

hdf5::Handle OpenFile(const std::string& path) {
  hdf5::SilenceErrors();
  if (!fs::exists(path)) hdf5::Fail(Where(path), "no such file (run `docmatch embed` first)");
  if (H5Fis_hdf5(path.c_str()) <= 0) hdf5::Fail(Where(path), "not an HDF5 file, or truncated");
  hdf5::EnsureMemoryForFile();
  hdf5::Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) hdf5::Fail(Where(path), "HDF5 cannot open it (truncated or damaged)");
  return file;
}

// The datasets of a file (part or whole), created empty.
void CreateDatasets(hid_t file, const std::string& where, int64_t dimension, bool sentences) {
  const hdf5::Handle strings = data::shard_format::VariableStringType();
  hdf5::CreateArray(file, where, "document_ids", strings.get(), {0}, kChunkRows);
  hdf5::CreateArray(file, where, "vectors", H5T_NATIVE_FLOAT, {0, static_cast<hsize_t>(dimension)}, kChunkRows);
  if (sentences) {
    hdf5::CreateArray(file, where, "sentence_vectors", H5T_NATIVE_FLOAT, {0, static_cast<hsize_t>(dimension)},
                      kChunkRows);
    hdf5::CreateArray(file, where, "paragraph_offsets", H5T_NATIVE_INT64, {0}, kChunkRows);
    hdf5::CreateArray(file, where, "document_offsets", H5T_NATIVE_INT64, {0}, kChunkRows);
    const int64_t zero = 0;
    hdf5::AppendRows(file, where, "paragraph_offsets", H5T_NATIVE_INT64, 1, &zero);
    hdf5::AppendRows(file, where, "document_offsets", H5T_NATIVE_INT64, 1, &zero);
  }
}

void AppendStrings(hid_t file, const std::string& where, const char* name, const std::vector<std::string>& values) {
  std::vector<const char*> pointers;
  for (const auto& v : values) pointers.push_back(v.c_str());
  const hdf5::Handle type = data::shard_format::VariableStringType();
  hdf5::AppendRows(file, where, name, type.get(), static_cast<int64_t>(pointers.size()), pointers.data());
}

// Documents [begin, end) of the corpus, read a shard range at a time.
std::vector<data::Document> ReadDocuments(const data::Corpus& corpus, int64_t begin, int64_t end) {
  std::vector<data::Document> documents;
  while (begin < end) {
    const auto [shard, local] = corpus.Locate(begin);
    const int64_t stop = std::min(end, corpus.shard_begin(shard + 1));
    for (data::Document& d : corpus.shard(shard).Read(local, local + stop - begin)) {
      d.index = begin++;
      documents.push_back(std::move(d));
    }
  }
  return documents;
}

// Appends `source`'s rows of `name` to `target` at row `at`, a block at a time;
// `shift` is added to int64 values (offsets), skipping the source's first row.
void CopyRows(hid_t source, const std::string& source_where, hid_t target, const std::string& target_where,
              const char* name, hid_t type, size_t element, int64_t at, bool offsets, int64_t shift) {
  const std::vector<hsize_t> dims = hdf5::Dimensions(source, source_where, name);
  const int64_t columns = dims.size() > 1 ? static_cast<int64_t>(dims[1]) : 1;
  const int64_t first = offsets ? 1 : 0, rows = static_cast<int64_t>(dims[0]);
  std::vector<char> buffer;
  for (int64_t begin = first; begin < rows; begin += kCopyRows) {
    const int64_t n = std::min(kCopyRows, rows - begin);
    buffer.resize(n * columns * element);
    hdf5::ReadRows(source, source_where, name, type, begin, n, buffer.data());
    if (offsets) {
      auto* values = reinterpret_cast<int64_t*>(buffer.data());
      for (int64_t i = 0; i < n; ++i) values[i] += shift;
    }
    hdf5::WriteRows(target, target_where, name, type, at + begin - first, n, buffer.data());
  }
}

// What makes a file an embeddings file: the format, its version and the
// dimension, then the caller's attributes.
void WriteAttributes(hid_t file, const std::string& where, int64_t dimension,
                     const std::map<std::string, std::string>& attributes) {
  hdf5::WriteAttribute(file, where, "docmatch_format", std::string(kFormat));
  hdf5::WriteAttribute(file, where, "format_version", kVersion);
  hdf5::WriteAttribute(file, where, "dimension", dimension);
  for (const auto& [name, value] : attributes) {
    // Folders by absolute path, links resolved: `search` and `eval` find them
    // from anywhere, and a run's `latest` stays the checkpoint that embedded.
    const bool folder = (name == "model" || name == "corpus") && !value.empty();
    hdf5::WriteAttribute(file, where, name.c_str(),
                         folder ? fs::weakly_canonical(fs::absolute(value)).string() : value);
  }
}

void JoinParts(const std::vector<std::string>& parts, const std::string& output, int64_t dimension, bool sentences,
               const std::map<std::string, std::string>& attributes) {
  const std::string tmp = output + ".tmp";
  const std::string where = Where(output);
  {
    int64_t documents = 0, sentence_rows = 0, paragraphs = 0;
    std::vector<hdf5::Handle> files;
    for (const auto& part : parts) {
      files.push_back(OpenFile(part));
      documents += hdf5::Dimensions(files.back().get(), Where(part), "vectors")[0];
      if (sentences) {
        sentence_rows += hdf5::Dimensions(files.back().get(), Where(part), "sentence_vectors")[0];
        paragraphs += hdf5::Dimensions(files.back().get(), Where(part), "paragraph_offsets")[0] - 1;
      }
    }
    hdf5::Handle file = hdf5::CreateFile(tmp, where);
    const hid_t f = file.get();
    const hdf5::Handle strings = data::shard_format::VariableStringType();
    const hsize_t D = static_cast<hsize_t>(dimension);
    hdf5::CreateArray(f, where, "vectors", H5T_NATIVE_FLOAT, {static_cast<hsize_t>(documents), D}, kChunkRows);
    if (sentences) {
      hdf5::CreateArray(f, where, "sentence_vectors", H5T_NATIVE_FLOAT, {static_cast<hsize_t>(sentence_rows), D},
                        kChunkRows);
      hdf5::CreateArray(f, where, "paragraph_offsets", H5T_NATIVE_INT64, {static_cast<hsize_t>(paragraphs + 1)},
                        kChunkRows);
      hdf5::CreateArray(f, where, "document_offsets", H5T_NATIVE_INT64, {static_cast<hsize_t>(documents + 1)},
                        kChunkRows);
      const int64_t zero = 0;
      hdf5::WriteRows(f, where, "paragraph_offsets", H5T_NATIVE_INT64, 0, 1, &zero);
      hdf5::WriteRows(f, where, "document_offsets", H5T_NATIVE_INT64, 0, 1, &zero);
    }
    std::vector<std::string> ids;
    int64_t document_base = 0, sentence_base = 0, paragraph_base = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
      const hid_t part = files[p].get();
      const std::string part_where = Where(parts[p]);
      const int64_t n = hdf5::Dimensions(part, part_where, "vectors")[0];
      const std::vector<std::string> part_ids = hdf5::ReadStrings(part, part_where, "document_ids", 0, n);
      ids.insert(ids.end(), part_ids.begin(), part_ids.end());
      CopyRows(part, part_where, f, where, "vectors", H5T_NATIVE_FLOAT, sizeof(float), document_base, false, 0);
      if (sentences) {
        CopyRows(part, part_where, f, where, "sentence_vectors", H5T_NATIVE_FLOAT, sizeof(float), sentence_base, false,
                 0);
        CopyRows(part, part_where, f, where, "paragraph_offsets", H5T_NATIVE_INT64, sizeof(int64_t), paragraph_base + 1,
                 true, sentence_base);
        CopyRows(part, part_where, f, where, "document_offsets", H5T_NATIVE_INT64, sizeof(int64_t), document_base + 1,
                 true, paragraph_base);
        sentence_base += hdf5::Dimensions(part, part_where, "sentence_vectors")[0];
        paragraph_base += hdf5::Dimensions(part, part_where, "paragraph_offsets")[0] - 1;
      }
      document_base += n;
    }
    hdf5::WriteStrings(f, where, "document_ids", ids, kChunkRows);
    WriteAttributes(f, where, dimension, attributes);
    hdf5::CloseFile(file, where);
  }
  fs::rename(tmp, output);
  for (const auto& part : parts) fs::remove(part);
}

// JoinParts, or on any failure no trace of it: neither the parts nor the
// joined file's temporary stays behind.
void JoinPartsOrClean(const std::vector<std::string>& parts, const std::string& output, int64_t dimension,
                      bool sentences, const std::map<std::string, std::string>& attributes) {
  try {
    JoinParts(parts, output, dimension, sentences, attributes);
  } catch (...) {
    std::error_code ignored;
    for (const auto& part : parts) fs::remove(part, ignored);
    fs::remove(output + ".tmp", ignored);
    throw;
  }
}

// A long-document tool says when its model reads documents in part: how
// many, how much of the corpus's text is left out, and what reads more.
void ReportCut(const model::DocumentModel& model, const data::Corpus& corpus, const std::string& example,
               const std::vector<int64_t>& documents_per_rank, const std::vector<int64_t>& tokens_per_rank, int rank) {
  int64_t documents = 0, tokens = 0;
  for (size_t r = 0; r < documents_per_rank.size(); ++r) {
    documents += documents_per_rank[r];
    tokens += tokens_per_rank[r];
  }
  if (rank != 0 || documents == 0) return;
  const std::string kind = model.config().kind;
  const std::string more = model::FindModelKind(kind, "[embed]").read_more;
  const int64_t total = corpus.manifest().totals.tokens;
  const double percent = total > 0 ? std::round(1000.0 * tokens / total) / 10 : 0.0;
  LOG(WARNING) << "[embed] " << documents << " of " << corpus.num_documents() << " documents are longer than the "
               << kind << " model reads" << (example.empty() ? "" : " (e.g. '" + example + "')") << ": " << tokens
               << " of " << total << " tokens (" << percent << "%) are left out of the vectors. " << more;
}

}  // namespace

EmbeddingWriter::EmbeddingWriter(std::string path, int64_t dimension, bool sentences)
    : path_(std::move(path)), dimension_(dimension), sentences_(sentences) {
  // Before the create, which would truncate a file another process is
  // writing before HDF5's own lock refused it (files/lock_file.h).
  lock_ = std::make_unique<files::LockFile>(
      path_ + ".lock",
      [this](const std::string& holder) {
        return Where(path_) + ": cannot create '" + path_ + "': another process is writing it (docmatch, " + holder +
               "); wait for it to finish, or write elsewhere";
      },
      /*remove=*/true);
  file_ = std::make_unique<data::shard_format::Handle>(hdf5::CreateFile(path_, Where(path_)));
  try {
    CreateDatasets(file_->get(), Where(path_), dimension, sentences);
  } catch (...) {
    Discard();
    throw;
  }
}

EmbeddingWriter::~EmbeddingWriter() { Discard(); }

void EmbeddingWriter::Discard() noexcept {
  if (!file_) return;
  file_.reset();  // unchecked: the file is incomplete and goes
  std::error_code ignored;
  fs::remove(path_, ignored);
}

torch::Tensor DocumentVectors(model::DocumentModel& model, const std::vector<const data::Document*>& documents,
                              const torch::Device& device, std::vector<model::DocumentSentences>* sentences) {
  torch::NoGradGuard no_grad;
  if (!model.has_sentences()) return model.Embed(documents, device).to(torch::kCPU, torch::kFloat).contiguous();
  // One pass: the sentence vectors, and the document vector from them. The
  // batch's sentence vectors come to the host in one copy, not one a
  // document: each copy from a GPU waits for it.
  std::vector<model::DocumentSentences> got = model.EmbedSentences(documents, device);
  if (got.empty()) return torch::empty({0, model.dimension()});
  std::vector<torch::Tensor> on_device;
  std::vector<int64_t> counts;
  for (const model::DocumentSentences& s : got) {
    on_device.push_back(s.vectors);
    counts.push_back(s.vectors.size(0));
  }
  const std::vector<torch::Tensor> on_host = torch::cat(on_device).to(torch::kCPU, torch::kFloat).split(counts);
  std::vector<torch::Tensor> means;
  for (size_t d = 0; d < got.size(); ++d) {
    got[d].vectors = on_host[d].contiguous();
    means.push_back(model::MeanSentenceVector(got[d]));
    if (sentences) sentences->push_back(std::move(got[d]));
  }
  return torch::stack(means).contiguous();
}

void EmbeddingWriter::Append(model::DocumentModel& model, const std::vector<const data::Document*>& documents,
                             const torch::Device& device) {
  std::vector<model::DocumentSentences> all;
  const torch::Tensor vectors = DocumentVectors(model, documents, device, sentences_ ? &all : nullptr);
  const torch::Tensor bad = torch::logical_not(torch::isfinite(vectors)).any(/*dim=*/1);
  if (bad.any().item<bool>()) {
    throw Error("embed", "the model gives document '" + documents[bad.nonzero()[0][0].item<int64_t>()]->id +
                             "' a vector with NaN or Inf: nothing written (are the model's weights sound?)");
  }
  std::vector<std::string> ids;
  for (const data::Document* d : documents) ids.push_back(d->id);
  if (sentences_) {
    AppendDocuments(ids, vectors, all);
  } else {
    AppendVectors(ids, vectors);
  }
}

void EmbeddingWriter::AppendDocuments(const std::vector<std::string>& ids, const torch::Tensor& vectors,
                                      const std::vector<model::DocumentSentences>& all) {
  DOCMATCH_CHECK(sentences_, "embed", "'", path_, "' holds no sentence vectors");
  DOCMATCH_CHECK(all.size() == ids.size(), "embed", all.size(), " documents' sentence vectors for ", ids.size(),
                 " ids");
  for (const model::DocumentSentences& s : all) {
    DOCMATCH_CHECK(s.vectors.device().is_cpu() && s.vectors.scalar_type() == torch::kFloat &&
                       s.vectors.is_contiguous() && s.vectors.dim() == 2 && s.vectors.size(1) == dimension_,
                   "embed", "sentence vectors for '", path_, "' must be contiguous CPU float32 rows of ", dimension_);
  }
  const hid_t f = file_->get();
  const std::string where = Where(path_);
  {
    std::vector<int64_t> paragraph_offsets, document_offsets;
    for (const model::DocumentSentences& s : all) {
      hdf5::AppendRows(f, where, "sentence_vectors", H5T_NATIVE_FLOAT, s.vectors.size(0), s.vectors.data_ptr<float>());
      for (size_t p = 1; p < s.paragraph_offsets.size(); ++p)
        paragraph_offsets.push_back(sentence_count_ + s.paragraph_offsets[p]);
      sentence_count_ += s.vectors.size(0);
      paragraph_count_ += static_cast<int64_t>(s.paragraph_offsets.size()) - 1;
      document_offsets.push_back(paragraph_count_);
    }
    hdf5::AppendRows(f, where, "paragraph_offsets", H5T_NATIVE_INT64, paragraph_offsets.size(),
                     paragraph_offsets.data());
    hdf5::AppendRows(f, where, "document_offsets", H5T_NATIVE_INT64, document_offsets.size(), document_offsets.data());
  }
  AppendVectors(ids, vectors);
}

void EmbeddingWriter::AppendVectors(const std::vector<std::string>& ids, const torch::Tensor& vectors) {
  const torch::Tensor rows = vectors.to(torch::kCPU, torch::kFloat).contiguous();
  DOCMATCH_CHECK(rows.dim() == 2 && rows.size(0) == static_cast<int64_t>(ids.size()) && rows.size(1) == dimension_,
                 "embed", ids.size(), " ids for vectors of shape ", rows.sizes(), " in a ", dimension_, "-d file");
  const hid_t f = file_->get();
  const std::string where = Where(path_);
  AppendStrings(f, where, "document_ids", ids);
  hdf5::AppendRows(f, where, "vectors", H5T_NATIVE_FLOAT, rows.size(0), rows.data_ptr<float>());
}

void EmbeddingWriter::WriteAttributes(const std::map<std::string, std::string>& attributes) {
  eval::WriteAttributes(file_->get(), Where(path_), dimension_, attributes);
}

void EmbeddingWriter::Close() {
  try {
    hdf5::CloseFile(*file_, Where(path_));
  } catch (...) {
    Discard();
    throw;
  }
  file_.reset();
}

int64_t EmbedCorpus(model::DocumentModel& model, const std::string& model_folder, const data::Corpus& corpus,
                    const std::string& output, int64_t batch_size, bool progress, dist::ProcessGroup& group) {
  const int rank = group.rank(), world = group.size();
  const torch::Device device = group.device();
  const int64_t N = corpus.num_documents();
  const int64_t begin = N * rank / world, end = N * (rank + 1) / world;
  const bool sentences = model.has_sentences();
  const std::string part = output + ".part-" + std::to_string(rank);
  if (!fs::path(output).parent_path().empty()) fs::create_directories(fs::path(output).parent_path());
  // The output's lock, on rank 0 for the whole write, the join of the parts
  // included; the other ranks wait for it before they create their parts, so
  // a second embed to this output stops before it touches any of its files.
  std::optional<files::LockFile> lock;
  if (rank == 0) {
    lock.emplace(
        output + ".lock",
        [&output](const std::string& holder) {
          return "[embed] cannot write '" + output + "': another process is writing it (docmatch, " + holder +
                 "); wait for it to finish, or write elsewhere";
        },
        /*remove=*/true);
  }
  group.control().Barrier();
  torch::NoGradGuard no_grad;
  model.module().eval();
  int64_t cut_documents = 0, cut_tokens = 0;  // documents the model reads in part, and the tokens it leaves
  std::string first_cut;                      // one of them, by id
  {
    EmbeddingWriter writer(part, model.dimension(), sentences);
    console::ProgressBar bar("[embed]", end - begin, "docs", "", rank == 0 && progress);
    for (int64_t from = begin; from < end; from += batch_size) {
      console::StopIfInterrupted();  // the part file goes with the writer
      const std::vector<data::Document> documents = ReadDocuments(corpus, from, std::min(end, from + batch_size));
      std::vector<const data::Document*> pointers;
      for (const auto& d : documents) {
        pointers.push_back(&d);
        const int64_t left = d.num_tokens() - model.TokensRead(d);
        if (left > 0 && cut_documents++ == 0) first_cut = d.id;
        cut_tokens += std::max<int64_t>(left, 0);
      }
      writer.Append(model, pointers, device);
      bar.Add(static_cast<int64_t>(documents.size()), static_cast<int64_t>(documents.size()));
    }
    writer.Close();
    bar.Finish();
  }
  ReportCut(model, corpus, first_cut, group.control().AllGather(cut_documents), group.control().AllGather(cut_tokens),
            rank);
  if (rank == 0) {
    std::vector<std::string> parts;
    for (int r = 0; r < world; ++r) parts.push_back(output + ".part-" + std::to_string(r));
    // "score" records how its documents are meant to be scored, so that a
    // reader can tell a file stripped of its sentence or window vectors.
    const std::string score = !sentences ? "cosine" : model.config().kind == "sdr" ? "sdr" : "maxsim";
    JoinPartsOrClean(parts, output, model.dimension(), sentences,
                     {{"kind", model.config().kind},
                      {"score", score},
                      {"model", model_folder},
                      {"corpus", corpus.directory()},
                      {"tokenizer_hash", corpus.manifest().tokenizer_hash}});
  }
  group.control().Barrier();
  return N;
}

int64_t RunEmbedding(const EmbedOptions& options, dist::ProcessGroup& group) {
  const data::Corpus corpus(options.corpus);
  io::ModelFolderInfo info;
  std::unique_ptr<model::DocumentModel> model = io::LoadModelFolder(options.model, &info);
  io::CheckTokenizer(info, corpus, options.model);
  model->module().to(group.device());
  return EmbedCorpus(*model, options.model, corpus, options.output, options.batch_size, options.progress, group);
}

int64_t FuseEmbeddings(const std::vector<std::string>& inputs, std::vector<double> weights, const std::string& output) {
  if (inputs.size() < 2) {
    throw Error("fuse", "needs two or more --embeddings files, got " + std::to_string(inputs.size()));
  }
  if (weights.empty()) weights.assign(inputs.size(), 1.0);
  if (weights.size() != inputs.size()) {
    throw Error("fuse", std::to_string(weights.size()) + " --weight values for " + std::to_string(inputs.size()) +
                            " --embeddings files: one each, in the same order");
  }
  double total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!(weights[i] > 0) || !std::isfinite(weights[i])) {
      throw Error("fuse", "the weight of '" + inputs[i] + "' is " + std::to_string(weights[i]) +
                              ": weights are positive (leave a file out instead of weighting it 0)");
    }
    total += weights[i];
  }
  if (!std::isfinite(total)) {
    // Only the weights' ratios count: very large ones (1e308 twice) are
    // taken relative to the largest, so that their sum stays finite.
    const double largest = *std::max_element(weights.begin(), weights.end());
    total = 0;
    for (double& w : weights) total += (w /= largest);
  }
  std::vector<std::unique_ptr<EmbeddingFile>> files;
  int64_t dimension = 0;
  for (const std::string& path : inputs) {
    files.push_back(std::make_unique<EmbeddingFile>(path));
    if (files.back()->kind() == "smash") {
      throw Error("fuse", "'" + path + "' holds SMASH vectors, which its pair head scores, not a " +
                              "cosine: fuse files whose score is the cosine of their vectors");
    }
    dimension += files.back()->dimension();
  }
  // The one input whose windows are kept (MaxSim), if any.
  std::optional<size_t> windows;
  for (size_t k = 0; k < files.size(); ++k) {
    if (files[k]->score() != "maxsim") continue;
    if (windows) {
      throw Error("fuse", "'" + files[*windows]->path() + "' and '" + files[k]->path() +
                              "' both score by MaxSim over their windows; fuse keeps the windows of one input");
    }
    windows = k;
  }
  const EmbeddingFile& first = *files[0];
  const int64_t N = first.size();
  // A file whose rows are in another order is read whole and reordered to
  // the first file's (its N x D floats in memory); the others a block at a time.
  std::vector<torch::Tensor> reordered(files.size());
  for (size_t k = 1; k < files.size(); ++k) {
    const EmbeddingFile& file = *files[k];
    if (file.size() != N) {
      throw Error("fuse", "'" + first.path() + "' holds " + std::to_string(N) + " documents and '" + file.path() +
                              "' " + std::to_string(file.size()) + ": fuse files embedded from the same corpus");
    }
    if (file.ids() == first.ids()) continue;
    std::vector<int64_t> rows;
    rows.reserve(N);
    for (const std::string& id : first.ids()) {
      const std::optional<int64_t> row = file.Row(id);
      if (!row) {
        throw Error("fuse", "document '" + id + "' of '" + first.path() + "' is not in '" + file.path() +
                                "': fuse files embedded from the same corpus");
      }
      rows.push_back(*row);
    }
    reordered[k] = file.Vectors(0, N).index_select(0, torch::tensor(rows, torch::kLong));
  }
  // Row `i` (in the first file's order) of input k.
  const auto row_of = [&](size_t k, int64_t i) { return k == 0 ? i : *files[k]->Row(first.ids()[i]); };
  const std::string tmp = output + ".tmp";
  if (!fs::path(output).parent_path().empty()) fs::create_directories(fs::path(output).parent_path());
  {
    EmbeddingWriter writer(tmp, dimension, /*sentences=*/windows.has_value());
    for (int64_t begin = 0; begin < N; begin += kCopyRows) {
      const int64_t end = std::min(N, begin + kCopyRows);
      std::vector<torch::Tensor> columns;
      std::vector<double> scale(files.size());
      for (size_t k = 0; k < files.size(); ++k) {
        const torch::Tensor rows =
            reordered[k].defined() ? reordered[k].slice(0, begin, end) : files[k]->Vectors(begin, end);
        const torch::Tensor norms = rows.norm(2, {1}, /*keepdim=*/true);
        const torch::Tensor zero = (norms.squeeze(1) == 0).nonzero();
        if (zero.size(0) > 0) {
          // A zero vector has no direction: its cosines are undefined, and
          // its block would leave the fused row short of unit length.
          const std::string id = first.ids()[begin + zero[0][0].item<int64_t>()];
          throw Error("fuse", "'" + files[k]->path() + "' gives document '" + id +
                                  "' a zero vector, which has no cosine: embed it again");
        }
        scale[k] = std::sqrt(weights[k] / total);
        columns.push_back(rows / norms * scale[k]);
      }
      const std::vector<std::string> ids(first.ids().begin() + begin, first.ids().begin() + end);
      if (!windows) {
        writer.AppendVectors(ids, torch::cat(columns, /*dim=*/1));
        continue;
      }
      // Each document's windows, scaled, with the other inputs' columns of
      // its row repeated beside every window.
      std::vector<model::DocumentSentences> documents;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t row = row_of(*windows, i);
        model::DocumentSentences d = files[*windows]->Sentences(row, row + 1)[0];
        DOCMATCH_CHECK(d.paragraph_offsets.size() == 2, "fuse", "'", files[*windows]->path(), "' gives document '",
                       first.ids()[i], "' ", d.paragraph_offsets.size() - 1, " paragraphs of windows, not one");
        const int64_t W = d.vectors.size(0);
        std::vector<torch::Tensor> parts;
        for (size_t k = 0; k < files.size(); ++k) {
          parts.push_back(k == *windows ? d.vectors / d.vectors.norm(2, {1}, true).clamp_min(1e-12) * scale[k]
                                        : columns[k][i - begin].unsqueeze(0).expand({W, -1}));
        }
        d.vectors = torch::cat(parts, /*dim=*/1).to(torch::kFloat).contiguous();
        documents.push_back(std::move(d));
      }
      writer.AppendDocuments(ids, torch::cat(columns, /*dim=*/1).to(torch::kFloat).contiguous(), documents);
    }
    std::string from;
    for (size_t k = 0; k < files.size(); ++k) {
      // Each input's share, file and what made its vectors.
      const std::string made_by = files[k]->kind() == "fused" ? "fused: " + files[k]->fused_from()
                                  : files[k]->model().empty() ? files[k]->kind()
                                                              : files[k]->kind() + " model " + files[k]->model();
      from += (k ? "; " : "") + std::to_string(weights[k] / total) + " " +
              fs::weakly_canonical(fs::absolute(files[k]->path())).string() + " (" + made_by + ")";
    }
    writer.WriteAttributes({{"kind", "fused"}, {"model", ""}, {"corpus", first.corpus()}, {"fused_from", from}});
    writer.Close();
  }
  std::error_code renamed;
  fs::rename(tmp, output, renamed);
  if (renamed) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw Error("fuse", "cannot move the fused file to '" + output + "': " + renamed.message());
  }
  return N;
}

EmbeddingFile::EmbeddingFile(std::string path) : path_(std::move(path)) {
  const hdf5::Handle file = OpenFile(path_);
  const hid_t f = file.get();
  const std::string where = Where(path_);
  if (H5Aexists(f, "docmatch_format") <= 0 || hdf5::ReadStringAttribute(f, where, "docmatch_format") != kFormat)
    hdf5::Fail(where, "an HDF5 file, but not docmatch embeddings (write them with `docmatch embed`)");
  if (hdf5::ReadIntAttribute(f, where, "format_version") != kVersion)
    hdf5::Fail(where, "another embeddings format version");
  kind_ = hdf5::ReadStringAttribute(f, where, "kind");
  model_ = hdf5::ReadStringAttribute(f, where, "model");
  if (H5Aexists(f, "corpus") > 0) corpus_ = hdf5::ReadStringAttribute(f, where, "corpus");
  if (H5Aexists(f, "fused_from") > 0) fused_from_ = hdf5::ReadStringAttribute(f, where, "fused_from");
  dimension_ = hdf5::ReadIntAttribute(f, where, "dimension");
  const int64_t n = static_cast<int64_t>(hdf5::Dimensions(f, where, "document_ids")[0]);
  ids_ = hdf5::ReadStrings(f, where, "document_ids", 0, n);
  for (int64_t i = 0; i < n; ++i) {
    const auto [it, added] = rows_.emplace(ids_[i], i);
    if (!added) {
      hdf5::Fail(where, "document id '" + ids_[i] + "' is in rows " + std::to_string(it->second) + " and " +
                            std::to_string(i) + ": a search or an evaluation could not tell them apart");
    }
  }
  const std::vector<hsize_t> dims = hdf5::Dimensions(f, where, "vectors");
  if (dims.size() != 2 || static_cast<int64_t>(dims[0]) != n || static_cast<int64_t>(dims[1]) != dimension_)
    hdf5::Fail(where, "'vectors' is not (documents x dimension)");
  if (dimension_ < 1) {
    hdf5::Fail(where, "its vectors have " + std::to_string(dimension_) +
                          " dimensions: there is nothing to compare (an embedding written empty?)");
  }
  {
    // Complex or integer numbers are not vectors docmatch wrote: say so,
    // rather than let the float read fail as if the file were damaged.
    const hdf5::Handle dataset(H5Dopen2(f, "vectors", H5P_DEFAULT), H5Dclose);
    const hdf5::Handle type(H5Dget_type(dataset.get()), H5Tclose);
    if (!type.valid() || H5Tget_class(type.get()) != H5T_FLOAT) {
      hdf5::Fail(where,
                 "'vectors' does not hold floating-point numbers (complex or integer values?); docmatch "
                 "embeddings are float32 (write them with `docmatch embed` or `encode`)");
    }
  }
  if (H5Lexists(f, "document_offsets", H5P_DEFAULT) > 0) {
    document_offsets_.resize(n + 1);
    hdf5::ReadRows(f, where, "document_offsets", H5T_NATIVE_INT64, 0, n + 1, document_offsets_.data());
    const int64_t p = static_cast<int64_t>(hdf5::Dimensions(f, where, "paragraph_offsets")[0]);
    paragraph_offsets_.resize(p);
    hdf5::ReadRows(f, where, "paragraph_offsets", H5T_NATIVE_INT64, 0, p, paragraph_offsets_.data());
  }
  // Marked SDR or MaxSim (its kind, or embed's "score"), but without the
  // vectors those scores read: ranking it by plain cosine would be another
  // model's figures under this one's name.
  const std::string marked = H5Aexists(f, "score") > 0 ? hdf5::ReadStringAttribute(f, where, "score") : "";
  const bool needs_sentences = kind_ == "sdr" || marked == "sdr" || marked == "maxsim";
  if (needs_sentences && document_offsets_.empty()) {
    hdf5::Fail(where, std::string("marked ") + (kind_ == "sdr" || marked == "sdr" ? "SDR" : "MaxSim") +
                          " but without its " + (kind_ == "sdr" || marked == "sdr" ? "sentence" : "window") +
                          " vectors (no document_offsets): it cannot be scored as its model scores; re-embed it "
                          "with `docmatch embed`");
  }
}

void EmbeddingFile::CheckCorpusOrder(const data::Corpus& corpus, const std::string& stage,
                                     const std::string& fix) const {
  if (size() != corpus.num_documents()) {
    throw Error(stage, path_ + " holds " + std::to_string(size()) + " vectors; corpus '" + corpus.directory() +
                           "' has " + std::to_string(corpus.num_documents()) + " documents: " + fix);
  }
  for (int64_t i = 0; i < size(); ++i) {
    const std::optional<int64_t> index = corpus.IndexOf(ids_[i]);
    if (!index || *index != i) {
      throw Error(stage, path_ + ": row " + std::to_string(i) + " is document '" + ids_[i] + "', " +
                             (index ? "row " + std::to_string(*index) + " of the corpus"
                                    : std::string("which the corpus does not have")) +
                             ": " + fix);
    }
  }
}

torch::Tensor EmbeddingFile::Vectors(int64_t begin, int64_t end) const {
  const hdf5::Handle file = OpenFile(path_);
  torch::Tensor out = torch::empty({end - begin, dimension_}, torch::kFloat);
  hdf5::ReadRows(file.get(), Where(path_), "vectors", H5T_NATIVE_FLOAT, begin, end - begin, out.data_ptr<float>());
  CheckFinite(out, begin, "vectors");
  return out;
}

void EmbeddingFile::CheckFinite(const torch::Tensor& rows, int64_t first_row, const std::string& dataset) const {
  // A NaN row scores NaN against everything and silently drops out of every
  // ranking (search would return short lists): name it instead.
  const torch::Tensor bad = torch::logical_not(torch::isfinite(rows)).any(/*dim=*/1);
  if (!bad.any().item<bool>()) return;
  const int64_t row = first_row + bad.nonzero()[0][0].item<int64_t>();
  const std::string id = dataset == "vectors" && row < size() ? " (document '" + ids_[row] + "')" : "";
  throw Error("eval", "'" + path_ + "': row " + std::to_string(row) + id + " of " + dataset +
                          " holds NaN or Inf: embed again (a damaged model gives such vectors; embed refuses one)");
}

std::vector<model::DocumentSentences> EmbeddingFile::Sentences(int64_t begin, int64_t end) const {
  if (!has_sentences()) hdf5::Fail(Where(path_), "has no sentence vectors (embed with an SDR model)");
  const hdf5::Handle file = OpenFile(path_);
  const int64_t p0 = document_offsets_[begin], p1 = document_offsets_[end];
  const int64_t s0 = paragraph_offsets_[p0], s1 = paragraph_offsets_[p1];
  torch::Tensor all = torch::empty({s1 - s0, dimension_}, torch::kFloat);
  hdf5::ReadRows(file.get(), Where(path_), "sentence_vectors", H5T_NATIVE_FLOAT, s0, s1 - s0, all.data_ptr<float>());
  CheckFinite(all, s0, "sentence_vectors");
  std::vector<model::DocumentSentences> out;
  for (int64_t d = begin; d < end; ++d) {
    const int64_t pa = document_offsets_[d], pb = document_offsets_[d + 1];
    model::DocumentSentences doc;
    doc.vectors = all.slice(0, paragraph_offsets_[pa] - s0, paragraph_offsets_[pb] - s0);
    for (int64_t p = pa; p <= pb; ++p) doc.paragraph_offsets.push_back(paragraph_offsets_[p] - paragraph_offsets_[pa]);
    out.push_back(std::move(doc));
  }
  return out;
}

}  // namespace docmatch::eval
