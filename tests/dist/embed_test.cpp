// `embed` at whatever rank count mpirun gave: the joined file lists every
// document in corpus order with the vector (and for SDR the sentence vectors
// and paragraphs) a single process computes for it alone.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <filesystem>

#include "../data/test_corpus.h"
#include "dist/process_group.h"
#include "eval/embeddings.h"
#include "io/checkpoint.h"
#include "io/checksums.h"
#include "io/model_folder.h"

namespace docmatch::eval {
namespace {
namespace fs = std::filesystem;

class EmbedEveryRank : public ::testing::TestWithParam<std::string> {};

TEST_P(EmbedEveryRank, JoinedFileEqualsOneProcessPerDocument) {
  dist::ProcessGroup comm;
  int id = static_cast<int>(::getpid());
  MPI_Bcast(&id, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const std::string dir = fs::temp_directory_path().string() + "/docmatch-embed-" + std::to_string(id);

  model::ModelConfig config;
  config.kind = GetParam();
  for (auto* c : {&config.smith.vocab_size, &config.sdr.vocab_size}) *c = 1005;
  config.smith.hidden = config.sdr.hidden = 16;
  config.smith.heads = config.sdr.heads = 2;
  config.smith.intermediate = config.sdr.intermediate = 32;
  config.smith.sentence_layers = config.smith.document_layers = config.sdr.layers = 1;
  config.smith.block_length = 8;
  config.smith.max_blocks = 6;
  torch::manual_seed(9);
  std::unique_ptr<model::DocumentModel> model = model::DocumentModel::Create(config);
  if (comm.rank() == 0) {
    fs::remove_all(dir);
    data::testing::WriteSyntheticCorpus(dir + "/corpus", {7, 6});
    fs::create_directories(dir + "/model");
    io::SaveModule(model->module(), dir + "/model/model.pt");
    io::ModelFolderInfo info;
    info.config = config;
    info.stage = "test";
    info.tokenizer_hash = "0123456789abcdef";
    io::WriteModelFolderInfo(dir + "/model", info);
    io::WriteChecksums(dir + "/model");  // as every writer of a model folder does
  }
  comm.control().Barrier();
  EmbedOptions options;
  options.model = dir + "/model";
  options.corpus = dir + "/corpus";
  options.output = dir + "/out/vectors.h5";
  options.batch_size = 3;
  options.progress = false;
  EXPECT_EQ(RunEmbedding(options, comm), 13);

  const EmbeddingFile file(options.output);
  const data::Corpus corpus(options.corpus);
  ASSERT_EQ(file.size(), 13);
  EXPECT_EQ(file.kind(), GetParam());
  EXPECT_EQ(file.has_sentences(), GetParam() == "sdr");
  model->module().eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor vectors = file.Vectors(0, 13);
  for (int64_t i = 0; i < 13; ++i) {
    const data::Document doc = corpus.Get(i);
    EXPECT_EQ(file.ids()[i], doc.id);
    EXPECT_TRUE(torch::allclose(vectors[i], model->Embed({&doc}, torch::kCPU)[0], 1e-5, 1e-5)) << doc.id;
    if (file.has_sentences()) {
      const auto stored = file.Sentences(i, i + 1)[0];
      const auto fresh = model->EmbedSentences({&doc}, torch::kCPU)[0];
      EXPECT_EQ(stored.paragraph_offsets, doc.paragraph_offsets) << doc.id;
      EXPECT_TRUE(torch::allclose(stored.vectors, fresh.vectors, 1e-5, 1e-5)) << doc.id;
    }
  }
  EXPECT_FALSE(fs::exists(options.output + ".part-0")) << "parts are removed once joined";
  comm.control().Barrier();
  if (comm.rank() == 0) fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Embed, EmbedEveryRank, ::testing::Values("smith", "sdr"));

}  // namespace
}  // namespace docmatch::eval
