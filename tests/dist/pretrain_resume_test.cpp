// Pre-training stopped and resumed from its checkpoint ends with the same
// parameters, bit for bit, as a run that never stopped (dropout on, epochs
// rolling over), at whatever rank count mpirun gave, on CPU and, with
// --deterministic, on CUDA (dropout then draws from the GPU's generator,
// which the checkpoint carries); and a checkpoint of
// another configuration is refused by name. The validation loss equals the
// objective of the whole global batch computed in one process; bf16 autocast
// trains close to fp32 with float32 master weights.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "../data/test_corpus.h"
#include "data/batches/blocks.h"
#include "dist/mpi_communicator.h"
#include "dist/process_group.h"
#include "io/checkpoint.h"
#include "model/config.h"
#include "recording_communicator.h"
#include "train/objectives.h"
#include "train/step_profiling.h"
#include "train/trainer.h"

namespace docmatch::train {
namespace {
namespace fs = std::filesystem;

// A scratch folder shared by all ranks (rank 0's pid names it).
std::string SharedScratch(dist::ProcessGroup& comm) {
  int id = static_cast<int>(::getpid());
  MPI_Bcast(&id, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const std::string dir = fs::temp_directory_path().string() + "/docmatch-pretrain-" + std::to_string(id);
  if (comm.rank() == 0) {
    fs::remove_all(dir);
    data::testing::WriteSyntheticCorpus(dir + "/corpus", {7, 6});
    std::ofstream(dir + "/tiny.yaml") << "model: {kind: smith, hidden: 16, heads: 2, intermediate: 32,\n"
                                         "  sentence_layers: 1, document_layers: 1, block_length: 8,\n"
                                         "  max_blocks: 6, dropout: 0.1}\n";
    std::ofstream(dir + "/wider.yaml") << "model: {kind: smith, hidden: 32, heads: 2, intermediate: 32,\n"
                                          "  sentence_layers: 1, document_layers: 1, block_length: 8,\n"
                                          "  max_blocks: 6, dropout: 0.1}\n";
  }
  comm.control().Barrier();
  return dir;
}

PretrainOptions Options(const std::string& dir, const std::string& run, int64_t steps) {
  PretrainOptions o;
  o.corpus = dir + "/corpus";
  o.model = dir + "/tiny.yaml";
  o.run = dir + "/" + run;
  o.batch_size = 2;
  o.steps = steps;
  o.optimizer.lr = 1e-3;
  o.optimizer.warmup_steps = 2;
  o.optimizer.total_steps = 8;
  o.checkpoint_every = 3;
  o.log_every = 1;
  o.progress = false;
  return o;
}

TEST(Pretraining, DocSplitObjectiveRunsAndLogs) {
  dist::ProcessGroup comm;
  const std::string dir = SharedScratch(comm);
  PretrainOptions docsplit = Options(dir, "docsplit", 4);
  docsplit.objective = "docsplit";
  EXPECT_EQ(RunPretraining(docsplit, comm).step, 4);
  if (comm.rank() == 0) {
    std::ifstream lines(dir + "/docsplit/metrics.jsonl");
    std::string line;
    int count = 0;
    while (std::getline(lines, line)) {
      const auto json = nlohmann::json::parse(line);
      EXPECT_TRUE(json.contains("train/infonce") && json.contains("train/lm")) << line;
      ++count;
    }
    EXPECT_EQ(count, 4);
  }
  comm.control().Barrier();
  if (comm.rank() == 0) fs::remove_all(dir);
}

// A number of a Chrome trace, written as a number or as a string.
double TraceNumber(const nlohmann::json& value) {
  return value.is_string() ? std::stod(value.get<std::string>()) : value.get<double>();
}

// The "train/loss" of each line of a run's metrics.jsonl.
std::vector<double> LoggedLosses(const std::string& run) {
  std::vector<double> losses;
  std::ifstream lines(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(lines, line)) {
    const auto json = nlohmann::json::parse(line);
    if (json.contains("train/loss")) losses.push_back(json["train/loss"].get<double>());
  }
  return losses;
}

// --profile-steps 2:3: every rank writes a Chrome trace of those two steps
// alone, one span a step, each holding its own AdamW updates (none outside
// them: step 1 and step 4 are not traced); and the run trains exactly as
// the same run unprofiled. (A range that runs past the last step, in
// finetune: tests/e2e/pipeline_check.py.)
TEST(Pretraining, ProfiledStepsAreTracedByEveryRankAndTrainTheSame) {
  dist::ProcessGroup comm;
  const std::string dir = SharedScratch(comm);
  PretrainOptions plain = Options(dir, "unprofiled", 4), profiled = Options(dir, "profiled", 4);
  profiled.profile_steps = "2:3";
  EXPECT_EQ(RunPretraining(plain, comm).step, 4);
  EXPECT_EQ(RunPretraining(profiled, comm).step, 4);

  const std::string path = ProfilePath(profiled.run, 2, 3, comm.rank());
  EXPECT_EQ(path, profiled.run + "/profile/steps-2-3.rank-" + std::to_string(comm.rank()) + ".json");
  ASSERT_TRUE(fs::exists(path)) << path;
  std::ifstream file(path);
  const nlohmann::json trace = nlohmann::json::parse(file);
  std::map<std::string, std::pair<double, double>> steps;  // span name -> [start, end] in microseconds
  std::vector<double> updates;                             // start of each fused AdamW update
  for (const auto& event : trace.at("traceEvents")) {
    if (event.value("ph", "") != "X") continue;
    const std::string name = event.at("name").get<std::string>();
    const double start = TraceNumber(event.at("ts")), end = start + TraceNumber(event.at("dur"));
    if (name.rfind("docmatch step ", 0) == 0) steps[name] = {start, end};
    if (name == "aten::_fused_adamw_") updates.push_back(start);
  }
  ASSERT_EQ(steps.size(), 2u) << "spans of another step than 2 and 3";
  ASSERT_TRUE(steps.count("docmatch step 2") && steps.count("docmatch step 3"));
  EXPECT_LE(steps["docmatch step 2"].second, steps["docmatch step 3"].first);
  int in_step_2 = 0, in_step_3 = 0;
  for (double start : updates) {
    in_step_2 += start >= steps["docmatch step 2"].first && start < steps["docmatch step 2"].second;
    in_step_3 += start >= steps["docmatch step 3"].first && start < steps["docmatch step 3"].second;
  }
  EXPECT_GT(in_step_2, 0);
  EXPECT_EQ(in_step_2, in_step_3);
  EXPECT_EQ(static_cast<size_t>(in_step_2 + in_step_3), updates.size());

  if (comm.rank() == 0) {
    const std::vector<double> expected = LoggedLosses(plain.run);
    EXPECT_EQ(expected.size(), 4u);
    EXPECT_EQ(LoggedLosses(profiled.run), expected);
  }
  // A range beyond the run's steps profiles nothing, and trains on.
  PretrainOptions beyond = Options(dir, "beyond", 4);
  beyond.profile_steps = "7:9";
  EXPECT_EQ(RunPretraining(beyond, comm).step, 4);
  EXPECT_FALSE(fs::exists(beyond.run + "/profile"));
  comm.control().Barrier();
  if (comm.rank() == 0) fs::remove_all(dir);
}

// Every tensor a training run hands to the data plane is floating point on
// the run's device: the fp32 model's vectors and gradients, the float64 loss
// sums. WP+SP (gathered block pool, its backward reduce-scatter, bucketed
// all-reduce, the first step's order), DocSplit by gradient caching, and a
// checkpoint (generator states, positions) each run through a recording data
// plane. With the order, the counts, the stop flag and the generator states
// on the data plane, as before issue 37, this fails. At one rank nothing
// crosses it: the test then requires that nothing is launched (the payload
// rule itself is checked before the one-rank shortcut:
// Collectives.DataPlaneRefusesMetadataAndOtherDevices).
TEST(DataPlane, TrainingHandsItOnlyFloatingTensorsOnTheRunsDevice) {
  auto recording = std::make_unique<dist::testing::RecordingCommunicator>(
      std::make_unique<dist::MpiCommunicator>(), std::set<torch::ScalarType>{torch::kFloat, torch::kDouble});
  const dist::testing::RecordingCommunicator& record = *recording;
  dist::ProcessGroup group(MPI_COMM_WORLD, torch::kCPU, std::move(recording));
  const std::string dir = SharedScratch(group);
  PretrainOptions sp = Options(dir, "record-sp", 2);
  sp.checkpoint_every = 1;
  EXPECT_EQ(RunPretraining(sp, group).step, 2);
  PretrainOptions ds = Options(dir, "record-ds", 2);
  ds.objective = "docsplit";
  ds.grad_cache = 1;
  EXPECT_EQ(RunPretraining(ds, group).step, 2);
  std::string violations;
  for (const std::string& v : record.violations()) violations += v + "; ";
  EXPECT_TRUE(violations.empty()) << violations;
  const std::set<std::string> seen = record.operations();
  for (const char* op : {"all_reduce", "broadcast", "all_gather (uneven)", "reduce_scatter"}) {
    if (group.size() > 1) {
      EXPECT_TRUE(seen.count(op)) << op << " never ran: the check above saw less than a training step";
    } else {
      // One rank: the weights, the block pool, the gradients and the loss
      // sums stay where they are (GradientSynchronizer, AllGatherWithGrad,
      // Communicator): no copies, no launches.
      EXPECT_FALSE(seen.count(op)) << op << " ran at one rank";
    }
  }
  if (group.size() > 1) {
    EXPECT_GT(record.tensors(), 50);
  } else {
    EXPECT_EQ(record.tensors(), 0);
  }
  group.control().Barrier();
  if (group.rank() == 0) fs::remove_all(dir);
}

double LoggedValue(const std::string& metrics, int64_t step, const std::string& key) {
  std::ifstream lines(metrics);
  std::string line;
  while (std::getline(lines, line)) {
    const auto json = nlohmann::json::parse(line);
    if (json["step"] == step && json.contains(key)) return json[key].get<double>();
  }
  ADD_FAILURE() << "no " << key << " at step " << step << " in " << metrics;
  return 0;
}

TEST(Pretraining, ValidationLossIsTheWholeBatchObjectiveInOneProcess) {
  dist::ProcessGroup comm;
  const std::string dir = SharedScratch(comm);
  if (comm.rank() == 0) {
    data::testing::WriteSyntheticCorpus(dir + "/valid", {5, 6}, "0123456789abcdef", /*seed=*/11);
    data::testing::WriteSyntheticCorpus(dir + "/foreign", {8}, "fedcba9876543210", /*seed=*/12);
  }
  comm.control().Barrier();
  // lr 0: the weights stay those of step 0, which best/ then holds.
  PretrainOptions o = Options(dir, "valid", 1);
  o.optimizer.lr = 0;
  o.valid_corpus = dir + "/valid";
  o.valid_documents = 11;
  EXPECT_EQ(RunPretraining(o, comm).step, 1);

  model::SmithConfig config = model::LoadModelConfig(dir + "/tiny.yaml").smith;
  config.vocab_size = 1005;
  model::SmithPretraining model(model::SmithEncoder(config), config);
  io::LoadModule(*model, dir + "/valid/best/model.pt");
  model->eval();
  torch::NoGradGuard no_grad;
  dist::ProcessGroup alone(MPI_COMM_SELF);
  const data::Corpus valid(dir + "/valid");
  const data::MaskOptions masks = data::PretrainingMasks(1005, o.seed, /*sentence_blocks=*/true);
  const int64_t global = o.batch_size * comm.size(), batches = 11 / global;
  double expected = 0;
  for (int64_t b = 0; b < batches; ++b) {
    std::vector<data::Document> docs;
    for (int64_t i = 0; i < global; ++i) docs.push_back(valid.Get(b * global + i));
    std::vector<const data::Document*> pointers;
    for (const auto& d : docs) pointers.push_back(&d);
    const data::BlockBatch batch = data::BuildBlockBatch(pointers, config.Blocks(), &masks, /*epoch=*/0);
    expected += SmithPretraining(model, model::ToTensors(batch, torch::kCPU), true, alone).value / batches;
  }
  const double logged = LoggedValue(dir + "/valid/metrics.jsonl", 1, "valid/loss");
  if (comm.rank() == 0) {
    EXPECT_NEAR(logged, expected, 1e-5 * expected);
  }

  // A validation corpus with another tokenizer is refused by name.
  o.run = dir + "/foreign-run";
  o.valid_corpus = dir + "/foreign";
  try {
    RunPretraining(o, comm);
    ADD_FAILURE() << "validated on a corpus of another tokenizer";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("another tokenizer"), std::string::npos) << e.what();
  }
  comm.control().Barrier();
  if (comm.rank() == 0) fs::remove_all(dir);
}

TEST(Pretraining, Bf16AutocastTrainsCloseToFp32WithFloat32Weights) {
  dist::ProcessGroup comm;
  const std::string dir = SharedScratch(comm);
  PretrainOptions fp32 = Options(dir, "fp32", 2), bf16 = Options(dir, "bf16", 2);
  bf16.precision = Precision::kBf16;
  EXPECT_EQ(RunPretraining(fp32, comm).step, 2);
  EXPECT_EQ(RunPretraining(bf16, comm).step, 2);
  // Step 1: the same weights, batch and dropout draws; only the arithmetic
  // differs (bfloat16 keeps 8 bits of mantissa).
  const double a = LoggedValue(dir + "/fp32/metrics.jsonl", 1, "train/loss");
  const double b = LoggedValue(dir + "/bf16/metrics.jsonl", 1, "train/loss");
  if (comm.rank() == 0) {
    EXPECT_NE(a, b) << "bf16 autocast changed nothing";
    EXPECT_NEAR(a, b, 0.02 * a);
  }
  const auto weights = io::ReadModuleFile(*io::CheckpointDirectory(dir + "/bf16").Latest() + "/model.pt");
  for (const auto& [name, tensor] : weights) EXPECT_EQ(tensor.scalar_type(), torch::kFloat) << name;
  comm.control().Barrier();
  if (comm.rank() == 0) fs::remove_all(dir);
}

// The WP+SP objective of `model` (eval mode) on the corpus's first `count`
// documents, masked as epoch 0 of a run with Options' seed masks them.
double ObjectiveOnFirstDocuments(model::SmithPretraining& model, const std::string& corpus_dir, int64_t count,
                                 const model::SmithConfig& config) {
  model->eval();
  torch::NoGradGuard no_grad;
  dist::ProcessGroup alone(MPI_COMM_SELF);
  const data::Corpus corpus(corpus_dir);
  const data::MaskOptions masks =
      data::PretrainingMasks(config.vocab_size, PretrainOptions().seed, /*sentence_blocks=*/true);
  std::vector<data::Document> docs;
  for (int64_t i = 0; i < count; ++i) docs.push_back(corpus.Get(i));
  std::vector<const data::Document*> pointers;
  for (const auto& d : docs) pointers.push_back(&d);
  const data::BlockBatch batch = data::BuildBlockBatch(pointers, config.Blocks(), &masks, /*epoch=*/0);
  return SmithPretraining(model, model::ToTensors(batch, torch::kCPU), true, alone).value;
}

// The latest checkpoints of runs `a` and `b` (tiny.yaml in `dir`) hold equal
// parameters, bit for bit.
void ExpectEqualParameters(const std::string& dir, const std::string& a, const std::string& b) {
  model::SmithConfig config = model::LoadModelConfig(dir + "/tiny.yaml").smith;
  config.vocab_size = 1005;
  model::SmithPretraining ma(model::SmithEncoder(config), config), mb(model::SmithEncoder(config), config);
  io::LoadModule(*ma, *io::CheckpointDirectory(a).Latest() + "/model.pt");
  io::LoadModule(*mb, *io::CheckpointDirectory(b).Latest() + "/model.pt");
  const auto pa = ma->named_parameters(), pb = mb->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i].value(), pb[i].value())) << pa[i].key();
}

TEST(Pretraining, ResumedRunEqualsTheUninterruptedOneBitForBit) {
  dist::ProcessGroup comm;
  const std::string dir = SharedScratch(comm);
  PretrainOptions straight = Options(dir, "straight", 8);
  straight.resume = false;
  EXPECT_EQ(RunPretraining(straight, comm).step, 8);

  // Stopped after step 6 (a checkpoint; nothing later survives a kill -9),
  // then started again with the same command and more steps.
  EXPECT_EQ(RunPretraining(Options(dir, "stopped", 6), comm).step, 6);
  EXPECT_EQ(RunPretraining(Options(dir, "stopped", 8), comm).step, 8);
  ExpectEqualParameters(dir, dir + "/straight", dir + "/stopped");

  model::SmithConfig config = model::LoadModelConfig(dir + "/tiny.yaml").smith;
  config.vocab_size = 1005;
  model::SmithPretraining a(model::SmithEncoder(config), config);
  io::LoadModule(*a, *io::CheckpointDirectory(dir + "/straight").Latest() + "/model.pt");
  // The run really trained: on the same batch (the corpus's first documents,
  // epoch 0's masks), the trained weights score below the initial ones. (The
  // logged losses of steps 1 and 8 come from different batches, whose spread
  // is as large as 8 steps' progress on a 13-document corpus.)
  torch::manual_seed(Options(dir, "straight", 8).seed);  // as the trainer draws the initial weights
  model::SmithPretraining initial(model::SmithEncoder(config), config);
  const double before = ObjectiveOnFirstDocuments(initial, dir + "/corpus", 4, config);
  const double after = ObjectiveOnFirstDocuments(a, dir + "/corpus", 4, config);
  EXPECT_LT(after, before - 0.05) << "initial " << before << ", trained " << after;
  if (comm.rank() == 0) {
    EXPECT_TRUE(fs::exists(dir + "/straight/tensorboard"));
  }

  // Resuming with another model configuration is refused before anything
  // loads, naming the differing keys, on every rank.
  PretrainOptions wider = Options(dir, "stopped", 10);
  wider.model = dir + "/wider.yaml";
  try {
    RunPretraining(wider, comm);
    ADD_FAILURE() << "resumed a 16-wide checkpoint into a 32-wide model";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("of another shape than this run's (hidden 16 -> 32)"), std::string::npos)
        << e.what();
  }
  comm.control().Barrier();
  if (comm.rank() == 0) fs::remove_all(dir);
}

// With --deterministic on `device` (every rank on its own or a shared GPU):
// 8 straight steps and 6 + resume + 2 end with equal parameters, bit for bit,
// and a CUDA run's checkpoint carries the CUDA generator its dropout draws
// from.
void ExpectDeterministicResume(dist::ProcessGroup& comm, const std::string& dir, const std::string& tag) {
  const torch::Device device = comm.device();
  PretrainOptions straight = Options(dir, tag + "-straight", 8), stopped = Options(dir, tag + "-stopped", 6);
  straight.deterministic = stopped.deterministic = true;
  EXPECT_EQ(RunPretraining(straight, comm).step, 8);
  EXPECT_EQ(RunPretraining(stopped, comm).step, 6);
  stopped.steps = 8;
  EXPECT_EQ(RunPretraining(stopped, comm).step, 8);
  EXPECT_TRUE(at::globalContext().deterministicAlgorithms()) << "the option did not reach torch";
  UseDeterministicAlgorithms(false);
  ExpectEqualParameters(dir, straight.run, stopped.run);
  const std::string latest = *io::CheckpointDirectory(straight.run).Latest();
  if (comm.rank() == 0) {
    EXPECT_EQ(fs::exists(latest + "/rng-cuda.pt"), device.is_cuda()) << latest;
  }
}

TEST(Pretraining, DeterministicRunResumesBitForBitOnCpu) {
  // Torch's deterministic mode throws for an operation it has no
  // deterministic kernel for: none of the step's may.
  dist::ProcessGroup comm;
  const std::string dir = SharedScratch(comm);
  ExpectDeterministicResume(comm, dir, "cpu");
  comm.control().Barrier();
  if (comm.rank() == 0) fs::remove_all(dir);
}

TEST(Pretraining, ResumedCudaRunEqualsTheUninterruptedOneBitForBit) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  dist::ProcessGroup comm;
  const std::string dir = SharedScratch(comm);
  const torch::Device gpu(torch::kCUDA, static_cast<c10::DeviceIndex>(comm.rank() % torch::cuda::device_count()));
  // Ranks beyond the GPUs share them: the MPI data plane, staged through host memory.
  dist::ProcessGroup on_gpu(MPI_COMM_WORLD, gpu);
  ExpectDeterministicResume(on_gpu, dir, "cuda");
  comm.control().Barrier();
  if (comm.rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace docmatch::train
