// Checkpoints: round trips, refusals that list the mismatched tensors, and a
// folder life cycle that never shows a half-written checkpoint.
#include "io/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "files/file_writer.h"
#include "model/smith.h"

namespace docmatch::io {
namespace {
namespace fs = std::filesystem;

model::SmithConfig Tiny(int64_t hidden = 16) {
  model::SmithConfig c;
  c.vocab_size = 50;
  c.hidden = hidden;
  c.heads = 2;
  c.intermediate = 32;
  c.sentence_layers = 1;
  c.document_layers = 1;
  c.block_length = 8;
  c.max_blocks = 4;
  return c;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "docmatch-ckpt-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string root_;
};

TEST_F(CheckpointTest, ModuleRoundTripRestoresEveryTensor) {
  torch::manual_seed(1);
  model::SmithPretraining saved(model::SmithEncoder(Tiny()), Tiny());
  fs::create_directories(root_);
  SaveModule(*saved, root_ + "/model.pt");
  torch::manual_seed(2);  // different initial weights
  model::SmithPretraining loaded(model::SmithEncoder(Tiny()), Tiny());
  LoadModule(*loaded, root_ + "/model.pt");
  const auto a = saved->named_parameters(), b = loaded->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].value(), b[i].value())) << a[i].key();
}

TEST_F(CheckpointTest, AnotherModelOrConfigIsRefusedWithTheMismatchedTensors) {
  fs::create_directories(root_);
  model::SmithEncoder small(Tiny(16));
  SaveModule(*small, root_ + "/encoder.pt");
  model::SmithEncoder wider(Tiny(32));
  const torch::Tensor before = wider->parameters()[0].clone();
  try {
    LoadModule(*wider, root_ + "/encoder.pt");
    FAIL() << "loaded a 16-wide checkpoint into a 32-wide model";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("another model or config"), std::string::npos) << message;
    EXPECT_NE(message.find("shape differs: embeddings.tokens.weight is [50, 16] in the checkpoint, [50, 32]"),
              std::string::npos)
        << message;
  }
  EXPECT_TRUE(torch::equal(before, wider->parameters()[0]));  // nothing half-loaded
  // A pre-training model has heads the bare encoder lacks.
  model::SmithPretraining heads(model::SmithEncoder(Tiny(16)), Tiny(16));
  try {
    LoadModule(*heads, root_ + "/encoder.pt");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("missing from the checkpoint: lm_bias [50]"), std::string::npos) << e.what();
  }
  std::ofstream(root_ + "/junk.pt") << "not an archive";
  EXPECT_THROW(LoadModule(*small, root_ + "/junk.pt"), std::runtime_error);
}

TEST_F(CheckpointTest, FolderKeepsTheLastKAndLatestNamesTheNewest) {
  CheckpointDirectory checkpoints(root_, /*keep_last=*/2);
  EXPECT_FALSE(checkpoints.Latest().has_value());
  for (int64_t step : {100, 200, 300}) {
    checkpoints.Save(step, [&](const std::string& folder) {
      std::ofstream(folder + "/state.txt") << step;
      std::ofstream(folder + "/trainer.json") << "{}";  // a checkpoint's record, with checksums.json (own_outputs.h)
    });
  }
  EXPECT_FALSE(fs::exists(root_ + "/step-100"));
  EXPECT_TRUE(fs::exists(root_ + "/step-200/state.txt"));
  EXPECT_EQ(fs::path(*checkpoints.Latest()).filename(), "step-300");
  EXPECT_TRUE(fs::is_symlink(root_ + "/latest"));

  // A save that fails part-way leaves no step-400, and latest unchanged.
  EXPECT_THROW(checkpoints.Save(400,
                                [](const std::string& folder) {
                                  std::ofstream(folder + "/half.txt") << "half";
                                  throw std::runtime_error("disk full");
                                }),
               std::runtime_error);
  EXPECT_FALSE(fs::exists(root_ + "/step-400"));
  EXPECT_FALSE(fs::exists(root_ + "/step-400.tmp"));
  EXPECT_EQ(fs::path(*checkpoints.Latest()).filename(), "step-300");

  // A leftover .tmp from a killed run is never taken for a checkpoint.
  fs::remove(root_ + "/latest");
  fs::create_directories(root_ + "/step-999.tmp");
  EXPECT_EQ(fs::path(*checkpoints.Latest()).filename(), "step-300");
}

void Write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

// own_outputs.h: what carries docmatch's record for what it is meant to be.
TEST_F(CheckpointTest, OnlyWhatCarriesDocmatchsRecordIsItsOwn) {
  EXPECT_EQ(NotDocmatchs(root_ + "/absent", Output::kCheckpoint), "");
  Write(root_ + "/ckpt/trainer.json", "{}");
  EXPECT_EQ(NotDocmatchs(root_ + "/ckpt", Output::kCheckpoint), "");  // without checksums.json: an older one
  EXPECT_NE(NotDocmatchs(root_ + "/ckpt", Output::kModelFolder), "");
  Write(root_ + "/model/config.json", "{\"kind\": \"mine\"}");
  EXPECT_EQ(NotDocmatchs(root_ + "/model", Output::kModelFolder),
            "has no config.json of docmatch's (\"format\": \"docmatch-model\")");
  Write(root_ + "/model/config.json", "{\"format\": \"docmatch-model\", \"version\": 1}");
  EXPECT_EQ(NotDocmatchs(root_ + "/model", Output::kModelFolder), "");
  Write(root_ + "/notes/my.txt", "x");
  EXPECT_EQ(NotDocmatchs(root_ + "/notes", Output::kCheckpoint), "has no trainer.json");
  EXPECT_NE(NotDocmatchs(root_ + "/notes", Output::kStaged), "");
  EXPECT_EQ(NotDocmatchs(root_ + "/notes/my.txt", Output::kModelFolder), "is not a folder");
  fs::create_directories(root_ + "/empty.tmp");
  EXPECT_EQ(NotDocmatchs(root_ + "/empty.tmp", Output::kStaged), "");
  Write(root_ + "/marked.tmp/model.pt", "half");
  Write(root_ + std::string("/marked.tmp/") + files::kStagingMark, "");
  EXPECT_EQ(NotDocmatchs(root_ + "/marked.tmp", Output::kStaged), "");
  EXPECT_EQ(NotDocmatchs(root_ + "/ckpt", Output::kStaged), "");  // a renamed best/ (best.old)
  Write(root_ + "/latest", "a file");
  EXPECT_EQ(NotDocmatchs(root_ + "/latest", Output::kLink), "is not a symbolic link");
  fs::create_directory_symlink("ckpt", root_ + "/link");
  EXPECT_EQ(NotDocmatchs(root_ + "/link", Output::kLink), "");

  // All or nothing: one path not docmatch's and nothing is removed.
  try {
    RemoveOwnOutputs({{root_ + "/ckpt", Output::kCheckpoint}, {root_ + "/notes", Output::kCheckpoint}}, "[test] why",
                     "advice");
    ADD_FAILURE() << "a folder of notes was removed as a checkpoint";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "[test] why: '" + root_ +
                                         "/notes' has no trainer.json, so it is not docmatch's checkpoint and is "
                                         "kept; advice");
  }
  EXPECT_TRUE(fs::exists(root_ + "/ckpt/trainer.json"));
  EXPECT_TRUE(fs::exists(root_ + "/notes/my.txt"));
  EXPECT_EQ(RemoveOwnOutputs({{root_ + "/ckpt", Output::kCheckpoint},
                              {root_ + "/marked.tmp", Output::kStaged},
                              {root_ + "/link", Output::kLink},
                              {root_ + "/absent", Output::kModelFolder}},
                             "why", "advice"),
            3u);
  EXPECT_FALSE(fs::exists(root_ + "/ckpt") || fs::exists(root_ + "/marked.tmp") || fs::is_symlink(root_ + "/link"));
}

// A checkpoint folder beside a user's own: saving and pruning leave it, a
// save onto it or over a `latest` file is refused before anything is written,
// and Outputs() lists what --fresh would remove.
TEST_F(CheckpointTest, SavesAndPrunesAroundAUsersFolders) {
  CheckpointDirectory checkpoints(root_, /*keep_last=*/1);
  Write(root_ + "/step-5/data.txt", "mine");
  const auto save = [&](int64_t step) {
    return checkpoints.Save(step, [](const std::string& folder) { std::ofstream(folder + "/trainer.json") << "{}"; });
  };
  save(1);
  save(2);
  EXPECT_EQ(checkpoints.Steps(),
            std::vector<std::string>{root_ + "/step-2"});  // step-1 pruned, step-5 not a checkpoint
  EXPECT_TRUE(fs::exists(root_ + "/step-5/data.txt"));
  EXPECT_THROW(save(5), std::runtime_error);
  EXPECT_TRUE(fs::exists(root_ + "/step-5/data.txt"));
  EXPECT_FALSE(fs::exists(root_ + "/step-5.tmp"));
  fs::remove(root_ + "/latest");
  Write(root_ + "/latest", "a file");
  EXPECT_THROW(save(3), std::runtime_error);
  EXPECT_FALSE(fs::exists(root_ + "/step-3"));
  std::ifstream latest(root_ + "/latest");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(latest), {}), "a file");
  std::vector<std::string> listed;
  for (const auto& [path, output] : checkpoints.Outputs()) listed.push_back(fs::path(path).filename().string());
  EXPECT_EQ(listed, (std::vector<std::string>{"step-2", "step-5", "latest", "latest.tmp"}));
}

}  // namespace
}  // namespace docmatch::io
