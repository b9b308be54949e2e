// Seeded random-mutation fuzzing of every reader of user or disk input: the
// JSONL document reader, the pair and relevance reader, the manifest, the
// shard reader, safetensors, checkpoint archives, checksum records and
// embeddings files (docmatch's own and h5py's usual string types). Each
// target starts from a valid file, and each execution writes a mutant of it
// (bit flips, overwritten runs, truncation, inserted or duplicated bytes) and
// reads it back whole. A reader may accept a mutant or throw a
// std::exception; anything else (a crash, an abort, a hang) fails the run.
// The figures (executions, exceptions, accepted) are printed as one JSON line
// per target; a crash shows as this test binary failing, not as a figure.
//
// DOCMATCH_FUZZ_EXECUTIONS scales the executions per target (default 1.0).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <random>
#include <string>

#include "../data/test_corpus.h"
#include "data/batches/pairs.h"
#include "data/corpus/corpus.h"
#include "data/text/corpus_reader.h"
#include "eval/embeddings.h"
#include "io/checkpoint.h"
#include "io/checksums.h"
#include "io/safetensors.h"

namespace docmatch {
namespace {
namespace fs = std::filesystem;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// One to four edits of `seed`, each anywhere in the file; `region` narrows
// where they land (for a target whose damage of interest is in one part).
std::string Mutate(const std::string& seed, std::mt19937_64& rng, size_t region_begin = 0,
                   size_t region_end = std::string::npos) {
  std::string bytes = seed;
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !bytes.empty(); ++e) {
    const size_t end = std::min(region_end, bytes.size());
    const size_t begin = std::min(region_begin, end - 1);
    const size_t at = begin + rng() % (end - begin);
    switch (rng() % 6) {
      case 0:  // a flipped bit
        bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng() % 8)));
        break;
      case 1: {  // a run of random bytes
        const size_t n = std::min<size_t>(1 + rng() % 64, bytes.size() - at);
        for (size_t i = 0; i < n; ++i) bytes[at + i] = static_cast<char>(rng());
        break;
      }
      case 2:  // cut off here
        bytes.resize(at);
        break;
      case 3: {  // random bytes inserted
        std::string inserted(1 + rng() % 16, '\0');
        for (char& c : inserted) c = static_cast<char>(rng());
        bytes.insert(at, inserted);
        break;
      }
      case 4: {  // a piece of the file repeated
        const size_t n = std::min<size_t>(1 + rng() % 128, bytes.size() - at);
        bytes.insert(at, bytes.substr(at, n));
        break;
      }
      default: {  // an interesting value: 0, 0xff.., or a length-like number
        static const char kValues[] = {'\0', '\xff', '\x7f', '\x80', '"', '{', '\n', '9'};
        bytes[at] = kValues[rng() % sizeof(kValues)];
        break;
      }
    }
  }
  return bytes;
}

struct Figures {
  int64_t executions = 0, exceptions = 0, accepted = 0;
};

double Scale() {
  const char* env = std::getenv("DOCMATCH_FUZZ_EXECUTIONS");
  return env ? std::atof(env) : 1.0;
}

// Runs `read` on `executions` mutants of `seed_file` (rewritten in place;
// the original is restored after) and prints the figures.
Figures Fuzz(const std::string& target, const std::string& seed_file, int64_t executions,
             const std::function<void()>& read, size_t region_begin = 0, size_t region_end = std::string::npos) {
  const std::string seed = ReadBytes(seed_file);
  EXPECT_NO_THROW(read()) << target << ": the unmutated seed must read";
  std::mt19937_64 rng(std::hash<std::string>{}(target));
  Figures f;
  const auto total = static_cast<int64_t>(static_cast<double>(executions) * Scale());
  for (int64_t i = 0; i < total; ++i) {
    WriteBytes(seed_file, Mutate(seed, rng, region_begin, region_end));
    ++f.executions;
    try {
      read();
      ++f.accepted;
    } catch (const std::exception&) {
      ++f.exceptions;
    }
  }
  WriteBytes(seed_file, seed);
  std::cout << "{\"fuzz_target\": \"" << target << "\", \"executions\": " << f.executions
            << ", \"exceptions\": " << f.exceptions << ", \"accepted\": " << f.accepted << "}" << std::endl;
  return f;
}

TEST(Fuzz, JsonlDocumentReader) {
  data::testing::ScratchDir dir("fuzz");
  const std::string path = dir.File("in.jsonl");
  data::testing::WriteFile(path,
                           "{\"id\": \"a\", \"title\": \"A\", \"text\": \"One sentence. Two\\n\\nthree \\u00e9.\"}\n"
                           "{\"id\": \"b\", \"text\": \"caf\xc3\xa9 \\\"quoted\\\" text\"}\n"
                           "{\"id\": \"c\", \"text\": \"\"}\n");
  const Figures f = Fuzz("jsonl", path, 4000, [&] {
    data::RawDocumentReader reader(path);
    data::RawDocument d;
    while (reader.Next(&d)) {
    }
  });
  EXPECT_GT(f.exceptions, 0);  // the mutations do reach the error paths
  EXPECT_GT(f.accepted, 0);
}

TEST(Fuzz, PairAndRelevanceReaders) {
  data::testing::ScratchDir dir("fuzz");
  data::testing::WriteSyntheticCorpus(dir.File("corpus"), {4, 3});
  const data::Corpus corpus(dir.File("corpus"));
  const std::string pairs = dir.File("pairs.jsonl"), relevance = dir.File("relevance.jsonl");
  data::testing::WriteFile(pairs,
                           "{\"source\": \"doc-0\", \"target\": \"doc-1\", \"label\": 1}\n"
                           "{\"source\": \"doc-2\", \"target\": \"doc-6\", \"label\": 0}\n");
  data::testing::WriteFile(relevance,
                           "{\"query\": \"doc-0\", \"relevant\": [\"doc-1\", \"doc-5\"]}\n"
                           "{\"source\": \"doc-3\", \"target\": \"doc-4\"}\n");
  const Figures p = Fuzz("pairs", pairs, 3000, [&] { data::ReadPairs(pairs, corpus); });
  const Figures r = Fuzz("relevance", relevance, 3000, [&] { data::ReadRelevance(relevance, corpus); });
  EXPECT_GT(p.exceptions, 0);
  EXPECT_GT(r.exceptions, 0);
}

TEST(Fuzz, ManifestAndShardReader) {
  data::testing::ScratchDir dir("fuzz");
  data::testing::WriteSyntheticCorpus(dir.File("corpus"), {40, 30});
  const std::string folder = dir.File("corpus");
  const auto read_all = [&] {
    const data::Corpus corpus(folder);
    for (int64_t i = 0; i < corpus.num_documents(); ++i) corpus.Get(i);
    for (int s = 0; s < corpus.num_shards(); ++s) corpus.shard(s).ReadLengths();
  };
  Fuzz("manifest", folder + "/" + data::kManifestFile, 1500, read_all);
  // The shard: everywhere, and (more executions) in its second half, where
  // the chunks of tokens and offsets lie, as most of a large shard's bytes do.
  std::string shard;
  for (const auto& entry : fs::directory_iterator(folder)) {
    if (entry.path().extension() == ".h5")
      shard = std::min(shard.empty() ? entry.path().string() : shard, entry.path().string());
  }
  const size_t size = fs::file_size(shard);
  const Figures whole = Fuzz("shard", shard, 600, read_all);
  const Figures data = Fuzz("shard-data", shard, 600, read_all, size / 2, size);
  EXPECT_GT(whole.exceptions + data.exceptions, 0);
}

TEST(Fuzz, SafetensorsCheckpointAndChecksumReaders) {
  data::testing::ScratchDir dir("fuzz");
  torch::manual_seed(0);
  const std::string st = dir.File("model.safetensors");
  io::WriteSafetensors({{"a.weight", torch::randn({4, 3})}, {"b", torch::arange(5, torch::kInt64)}}, st,
                       {{"format", "pt"}});
  Fuzz("safetensors", st, 3000, [&] { io::ReadSafetensors(st); });

  torch::nn::Linear linear(3, 2);
  const std::string archive = dir.File("model.pt");
  io::SaveModule(*linear, archive);
  Fuzz("checkpoint-archive", archive, 1500, [&] { io::ReadModuleFile(archive); });

  fs::create_directories(dir.File("folder"));
  data::testing::WriteFile(dir.File("folder/config.json"), "{\"format\": \"docmatch-model\"}\n");
  data::testing::WriteFile(dir.File("folder/trainer.json"), "{\"step\": 3}\n");
  io::WriteChecksums(dir.File("folder"));
  Fuzz("checksums", dir.File("folder/checksums.json"), 2000, [&] { io::VerifyChecksums(dir.File("folder")); });
}

// How an embeddings file stores its document ids: docmatch writes fixed-size
// UTF-8 (NUL-padded, chunked, Fletcher-32); h5py writes np.array(ids,
// dtype="S30") as fixed ASCII (contiguous), a str list as variable-length
// UTF-8; Fortran-style writers pad with spaces; integer ids are not ids.
enum class Ids { kDocmatch, kFixedAscii, kVariableUtf8, kSpacePadded, kIntegers };

// An embeddings file of `ids` and vectors row i = (i, i + 0.5, ...) written
// with the HDF5 C API, the attributes every writer sets.
void WriteEmbeddings(const std::string& path, const std::vector<std::string>& ids, Ids how) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t n = ids.size(), dims[2] = {n, 3};
  std::vector<double> vectors;
  for (hsize_t i = 0; i < n; ++i)
    for (int j = 0; j < 3; ++j) vectors.push_back(static_cast<double>(i) + 0.5 * j);
  hid_t properties = H5Pcreate(H5P_DATASET_CREATE);
  if (how == Ids::kDocmatch) {
    const hsize_t chunk[2] = {2, 3};
    H5Pset_chunk(properties, 2, chunk);
    H5Pset_fletcher32(properties);
  }
  hid_t space = H5Screate_simple(2, dims, nullptr);
  hid_t dataset = H5Dcreate2(file, "vectors", H5T_IEEE_F64LE, space, H5P_DEFAULT, properties, H5P_DEFAULT);
  H5Dwrite(dataset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, vectors.data());
  H5Dclose(dataset);
  H5Sclose(space);
  H5Pclose(properties);

  space = H5Screate_simple(1, &n, nullptr);
  hid_t type = H5Tcopy(how == Ids::kIntegers ? H5T_NATIVE_INT64 : H5T_C_S1);
  std::string packed;
  std::vector<const char*> pointers;
  std::vector<int64_t> numbers(n);
  const size_t width = 12;
  for (const std::string& id : ids) {
    pointers.push_back(id.c_str());
    packed += id + std::string(width - id.size(), how == Ids::kSpacePadded ? ' ' : '\0');
  }
  const void* data = packed.data();
  if (how == Ids::kVariableUtf8) {
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    data = pointers.data();
  } else if (how == Ids::kIntegers) {
    data = numbers.data();
  } else {
    H5Tset_size(type, width);
    H5Tset_strpad(type, how == Ids::kSpacePadded ? H5T_STR_SPACEPAD : H5T_STR_NULLPAD);
    H5Tset_cset(type, how == Ids::kDocmatch ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
  }
  dataset = H5Dcreate2(file, "document_ids", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  H5Dclose(dataset);
  H5Tclose(type);
  H5Sclose(space);

  auto attribute = [&](const char* name, const std::string& value) {
    hid_t string = H5Tcopy(H5T_C_S1);
    H5Tset_size(string, value.size());
    hid_t scalar = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(file, name, string, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, string, value.data());
    H5Aclose(a);
    H5Sclose(scalar);
    H5Tclose(string);
  };
  auto number = [&](const char* name, int64_t value) {
    hid_t scalar = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(file, name, H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &value);
    H5Aclose(a);
    H5Sclose(scalar);
  };
  attribute("docmatch_format", "docmatch-embeddings");
  number("format_version", 1);
  number("dimension", 3);
  attribute("kind", "match_bert");
  attribute("model", "elsewhere");
  H5Fclose(file);
}

TEST(Fuzz, EmbeddingsReader) {
  data::testing::ScratchDir dir("fuzz");
  const std::vector<std::string> ids = {"d0", "caf\xc3\xa9", "Ice_age", "x-3", "", "d5"};
  const auto read_all = [](const std::string& path) {
    const eval::EmbeddingFile file(path);
    file.Vectors(0, file.size());
    return file;
  };
  // Every string type a writer uses reads back as the same ids and vectors.
  for (const Ids how : {Ids::kDocmatch, Ids::kFixedAscii, Ids::kVariableUtf8, Ids::kSpacePadded}) {
    const std::string path = dir.File("ids-" + std::to_string(static_cast<int>(how)) + ".h5");
    WriteEmbeddings(path, ids, how);
    const eval::EmbeddingFile file = read_all(path);
    EXPECT_EQ(file.ids(), ids) << path;
    EXPECT_TRUE(file.Vectors(0, 6).equal(torch::tensor({0.0, 0.5, 1.0}).unsqueeze(0) +
                                         torch::arange(6, torch::kDouble).unsqueeze(1)))
        << path;
  }
  // Ids that are not strings are named as such.
  WriteEmbeddings(dir.File("numbers.h5"), ids, Ids::kIntegers);
  try {
    read_all(dir.File("numbers.h5"));
    ADD_FAILURE() << "integer ids were read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'document_ids' is not strings"), std::string::npos) << e.what();
  }
  // Damage: docmatch's own layout and h5py's fixed ASCII. (Variable-length
  // strings live in HDF5's global heap, whose damaged records crash HDF5
  // 1.10 itself; docmatch writes none.)
  for (const Ids how : {Ids::kDocmatch, Ids::kFixedAscii}) {
    const std::string path = dir.File("ids-" + std::to_string(static_cast<int>(how)) + ".h5");
    const Figures f =
        Fuzz(how == Ids::kDocmatch ? "embeddings" : "embeddings-h5py-fixed-ascii", path, 3000, [&] { read_all(path); });
    EXPECT_GT(f.exceptions, 0);
  }
}

// A header that claims more than the file can hold (a width or a row count
// damaged into the billions) is named before anything is allocated: the fuzz
// test above, on a 128 GiB machine, grew until the kernel killed it.
TEST(Embeddings, AShapeTheFileCannotHoldIsNamedBeforeAllocating) {
  data::testing::ScratchDir dir("claims");
  const std::vector<std::string> ids = {"d0", "d1", "d2"};
  struct Claim {
    hsize_t rows;
    size_t width;
    const char* what;
  };
  for (const Claim claim : {Claim{3, size_t{1} << 31, "3 x 1 values of 2147483648 bytes"},
                            Claim{hsize_t{1} << 40, 12, "1099511627776 x 1 values of 12 bytes"}}) {
    const std::string path = dir.File("claims-" + std::to_string(claim.rows) + ".h5");
    WriteEmbeddings(path, ids, Ids::kFixedAscii);
    // The ids replaced by a chunked dataset of the claimed shape, nothing
    // written: the file stays a few KB.
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    H5Ldelete(file, "document_ids", H5P_DEFAULT);
    const hsize_t dims = claim.rows, max_dims = H5S_UNLIMITED, chunk = 1;
    const hid_t space = H5Screate_simple(1, &dims, &max_dims);
    const hid_t properties = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(properties, 1, &chunk);
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, claim.width);
    const hid_t dataset = H5Dcreate2(file, "document_ids", type, space, H5P_DEFAULT, properties, H5P_DEFAULT);
    ASSERT_GE(dataset, 0);
    H5Dclose(dataset);
    H5Tclose(type);
    H5Pclose(properties);
    H5Sclose(space);
    H5Fclose(file);
    ASSERT_LT(fs::file_size(path), 1u << 20);
    try {
      const eval::EmbeddingFile embeddings(path);
      ADD_FAILURE() << path << " was read";
    } catch (const std::runtime_error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(path), std::string::npos) << message;
      EXPECT_NE(message.find("'document_ids' claims " + std::string(claim.what)), std::string::npos) << message;
      EXPECT_NE(message.find("damaged or truncated"), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace docmatch
