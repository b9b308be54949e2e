// Shard write -> read round trips, corpus random access, and what a wrong file
// gives (data/corpus/shard_writer.h, shard_reader.h, corpus.h).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>
#include <vector>

#include "../test_corpus.h"
#include "data/corpus/corpus.h"
#include "data/corpus/shard_reader.h"
#include "data/corpus/shard_writer.h"

namespace docmatch::data {
namespace {
namespace fs = std::filesystem;

void ExpectSameDocument(const Document& expected, const Document& actual) {
  EXPECT_EQ(expected.id, actual.id);
  EXPECT_EQ(expected.title, actual.title);
  EXPECT_EQ(expected.tokens, actual.tokens) << expected.id;
  EXPECT_EQ(expected.sentence_offsets, actual.sentence_offsets) << expected.id;
  EXPECT_EQ(expected.paragraph_offsets, actual.paragraph_offsets) << expected.id;
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Shard, WriteReadRoundTripOfStructureAndTokens) {
  testing::ScratchDir dir("shard");
  const std::string path = dir.File("s.h5");
  ShardWriter writer(path, "feedfacecafebeef", 1005);
  std::vector<Document> documents;
  for (int i = 0; i < 300; ++i) documents.push_back(testing::SyntheticDocument(i));
  for (const auto& d : documents) writer.Add(d);
  const ShardCounts counts = writer.Close();
  EXPECT_EQ(counts.documents, 300);

  const ShardReader reader(path);
  EXPECT_EQ(reader.header().tokenizer_hash, "feedfacecafebeef");
  EXPECT_EQ(reader.header().vocab_size, 1005);
  EXPECT_EQ(reader.header().counts.tokens, counts.tokens);
  // Whole shard, single documents, and ranges straddling chunk boundaries.
  for (auto [begin, end] : std::vector<std::pair<int, int>>{{0, 300}, {0, 1}, {299, 300}, {17, 251}, {150, 150}}) {
    const std::vector<Document> read = reader.Read(begin, end);
    ASSERT_EQ(static_cast<int>(read.size()), end - begin);
    for (int i = begin; i < end; ++i) {
      EXPECT_EQ(read[i - begin].index, i);
      ExpectSameDocument(documents[i], read[i - begin]);
    }
  }
  const auto lengths = reader.ReadLengths();
  const auto ids = reader.ReadIds();
  for (int i = 0; i < 300; ++i) {
    EXPECT_EQ(lengths[i].tokens, documents[i].num_tokens());
    EXPECT_EQ(lengths[i].sentences, documents[i].num_sentences());
    EXPECT_EQ(lengths[i].paragraphs, documents[i].num_paragraphs());
    EXPECT_EQ(ids[i], documents[i].id);
  }
  EXPECT_THROW(reader.Read(10, 301), std::runtime_error);
}

TEST(Shard, EmptyShardAndEmptyDocumentStructure) {
  testing::ScratchDir dir("shard");
  ShardWriter(dir.File("empty.h5"), "00", 10).Close();
  const ShardReader reader(dir.File("empty.h5"));
  EXPECT_EQ(reader.num_documents(), 0);
  EXPECT_TRUE(reader.Read(0, 0).empty());
}

TEST(Shard, UnclosedWriterLeavesNothingThatLooksComplete) {
  testing::ScratchDir dir("shard");
  {
    ShardWriter writer(dir.File("s.h5"), "00", 10);
    writer.Add(testing::SyntheticDocument(0));
  }  // destroyed without Close(), e.g. by an exception
  EXPECT_FALSE(fs::exists(dir.File("s.h5")));
  EXPECT_FALSE(fs::exists(dir.File("s.h5.tmp")));
}

TEST(Shard, TruncatedForeignAndNonHdf5FilesGiveErrorsNamingTheFile) {
  testing::ScratchDir dir("shard");
  ShardWriter writer(dir.File("good.h5"), "00", 10);
  for (int i = 0; i < 200; ++i) writer.Add(testing::SyntheticDocument(i));
  writer.Close();

  fs::copy_file(dir.File("good.h5"), dir.File("truncated.h5"));
  fs::resize_file(dir.File("truncated.h5"), fs::file_size(dir.File("good.h5")) / 2);
  std::string error = ErrorOf([&] {
    ShardReader reader(dir.File("truncated.h5"));
    reader.Read(0, 200);
  });
  EXPECT_NE(error.find("truncated.h5"), std::string::npos) << error;
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;

  {  // an HDF5 file from somewhere else
    shard_format::Handle file(H5Fcreate(dir.File("foreign.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                              H5Fclose);
    const hsize_t dims[1] = {4};
    shard_format::Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose);
    shard_format::Handle data(
        H5Dcreate2(file.get(), "weights", H5T_NATIVE_FLOAT, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
        H5Dclose);
  }
  error = ErrorOf([&] { ShardReader reader(dir.File("foreign.h5")); });
  EXPECT_NE(error.find("foreign.h5"), std::string::npos) << error;
  EXPECT_NE(error.find("not a docmatch shard"), std::string::npos) << error;

  testing::WriteFile(dir.File("text.h5"), "just some text, not HDF5\n");
  error = ErrorOf([&] { ShardReader reader(dir.File("text.h5")); });
  EXPECT_NE(error.find("text.h5"), std::string::npos) << error;
  EXPECT_NE(error.find("not an HDF5 file"), std::string::npos) << error;

  error = ErrorOf([&] { ShardReader reader(dir.File("absent.h5")); });
  EXPECT_NE(error.find("no such file"), std::string::npos) << error;
}

// The address space this process maps now (/proc/self/status VmSize), KiB.
int64_t MappedKib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoll(line.substr(7));
  }
  return -1;
}

// Opening or creating a shard when the process can allocate almost nothing
// more (ulimit -v just above what it maps, the heap used up but 1 MiB):
// std::bad_alloc, which the
// commands turn into one line, where HDF5 1.10 dereferenced its failed
// allocation (a SIGSEGV in H5AC_create). Run in a child process, whose
// limit cannot touch the other tests; its exit code says what it saw.
TEST(Shard, OpeningOrCreatingUnderAnAddressSpaceLimitThrowsBadAlloc) {
  testing::ScratchDir dir("shard");
  {
    ShardWriter writer(dir.File("s.h5"), "00", 10);
    for (int i = 0; i < 20; ++i) writer.Add(testing::SyntheticDocument(i));
    writer.Close();
  }
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::vector<void*> held;
    held.reserve(1 << 16);
    const int64_t mapped = MappedKib();
    const rlimit limit{static_cast<rlim_t>(mapped + 4096) * 1024, static_cast<rlim_t>(mapped + 4096) * 1024};
    if (mapped < 0 || setrlimit(RLIMIT_AS, &limit) != 0) _exit(10);
    // Every byte malloc can still give (the heap's free space too), then 1 MiB
    // back: room for a path's strings, not for HDF5's caches.
    for (void* block; held.size() < held.capacity() && (block = std::malloc(64 << 10)) != nullptr;) {
      held.push_back(block);
    }
    for (int i = 0; i < 16 && !held.empty(); ++i) {
      std::free(held.back());
      held.pop_back();
    }
    int outcome = 0;
    try {
      ShardReader reader(dir.File("s.h5"));
      outcome |= 1;  // opened: not what a 4 MiB margin allows
    } catch (const std::bad_alloc&) {
    } catch (...) {
      outcome |= 2;
    }
    try {
      ShardWriter writer(dir.File("new.h5"), "00", 10);
      writer.Add(testing::SyntheticDocument(0));
      writer.Close();  // where the file is made
      outcome |= 4;
    } catch (const std::bad_alloc&) {
    } catch (...) {
      outcome |= 8;
    }
    _exit(outcome);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: opened, 2: another error opening, 4: created, 8: another error creating, "
                                       "10: no limit could be set";
  EXPECT_FALSE(fs::exists(dir.File("new.h5")));
  EXPECT_FALSE(fs::exists(dir.File("new.h5.tmp")));
}

TEST(Corpus, RandomAccessByIndexAndIdAcrossShards) {
  testing::ScratchDir dir("corpus");
  testing::WriteSyntheticCorpus(dir.path(), {40, 1, 25});
  const Corpus corpus(dir.path());
  EXPECT_EQ(corpus.num_documents(), 66);
  EXPECT_EQ(corpus.num_shards(), 3);
  for (int64_t i : {0, 39, 40, 41, 65}) {
    const Document d = corpus.Get(i);
    EXPECT_EQ(d.index, i);
    ExpectSameDocument(testing::SyntheticDocument(i), d);
    EXPECT_EQ(corpus.IndexOf("doc-" + std::to_string(i)), i);
  }
  EXPECT_EQ(corpus.Locate(40), std::make_pair(1, int64_t{0}));
  EXPECT_FALSE(corpus.IndexOf("no-such-doc").has_value());
  EXPECT_THROW(corpus.Get(66), std::out_of_range);
}

TEST(Corpus, RefusesIncompleteOrMixedCorpora) {
  testing::ScratchDir dir("corpus");
  std::string error = ErrorOf([&] { Corpus corpus(dir.path()); });
  EXPECT_NE(error.find("manifest.json"), std::string::npos) << error;

  testing::WriteSyntheticCorpus(dir.path(), {10, 10}, "aaaa");
  // Replace shard 1 with one made by another tokenizer.
  {
    ShardWriter writer(dir.File("shard-00001.h5"), "bbbb", 1005);
    for (int i = 10; i < 20; ++i) writer.Add(testing::SyntheticDocument(i));
    writer.Close();
  }
  error = ErrorOf([&] { Corpus corpus(dir.path()); });
  EXPECT_NE(error.find("shard-00001.h5"), std::string::npos) << error;
  EXPECT_NE(error.find("tokenizer"), std::string::npos) << error;

  fs::remove(dir.File("shard-00001.h5"));
  error = ErrorOf([&] { Corpus corpus(dir.path()); });
  EXPECT_NE(error.find("shard-00001.h5"), std::string::npos) << error;
}

}  // namespace
}  // namespace docmatch::data

namespace docmatch::data {
namespace {

TEST(Corpus, OpenShardFilesStayBoundedWhileEveryShardIsRead) {
  testing::ScratchDir dir("open-bound");
  const std::vector<int64_t> sizes(3 * MaxOpenShards(), 5);  // three times more shards than the bound
  testing::WriteSyntheticCorpus(dir.path(), sizes);
  const Corpus corpus(dir.path());
  EXPECT_LE(OpenShardFiles(), MaxOpenShards());
  // Round-robin over the shards, so every read evicts: each document still
  // comes back whole, from a file opened again.
  const int64_t shards = static_cast<int64_t>(sizes.size());
  for (int64_t local = 0; local < 5; ++local) {
    for (int64_t s = 0; s < shards; ++s) {
      const int64_t index = s * 5 + local;
      const Document d = corpus.Get(index);
      const Document expected = testing::SyntheticDocument(index);
      ASSERT_EQ(d.id, expected.id);
      ASSERT_EQ(d.tokens, expected.tokens);
      ASSERT_EQ(d.sentence_offsets, expected.sentence_offsets);
      ASSERT_LE(OpenShardFiles(), MaxOpenShards());
    }
  }
  EXPECT_EQ(OpenShardFiles(), MaxOpenShards());
}

}  // namespace
}  // namespace docmatch::data
