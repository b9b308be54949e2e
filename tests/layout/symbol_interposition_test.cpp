// The libraries docmatch links share one process cleanly. Debian's
// libsentencepiece and libtorch's c10 both export FLAGS_minloglevel (a 32-byte
// flag object and a 4-byte int); linked with c10 first, SentencePiece's
// start-up wrote its object over c10's neighbouring flags, and a failed
// allocation aborted the process instead of throwing (CMakeLists.txt,
// torch_after_sentencepiece).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

C10_DECLARE_bool(caffe2_use_fatal_for_enforce);

namespace docmatch {
namespace {

// The file of the loaded library that defines `symbol` for the whole process.
std::string DefiningLibrary(const char* symbol) {
  void* address = dlsym(RTLD_DEFAULT, symbol);
  Dl_info info{};
  if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

TEST(SymbolInterposition, SentencePieceOwnsTheSharedFlagName) {
  EXPECT_NE(DefiningLibrary("FLAGS_minloglevel").find("sentencepiece"), std::string::npos)
      << "FLAGS_minloglevel resolves to " << DefiningLibrary("FLAGS_minloglevel")
      << ": SentencePiece's flag object is written over c10's globals";
  EXPECT_FALSE(FLAGS_caffe2_use_fatal_for_enforce) << "c10's globals were overwritten";
}

TEST(SymbolInterposition, AFailedAllocationThrows) {
  // 2^46 floats (256 TiB): no machine gives it, and c10 says so by throwing.
  try {
    const torch::Tensor impossible = torch::empty({int64_t{1} << 46}, torch::kFloat);
    FAIL() << "allocated " << impossible.nbytes() << " bytes";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("can't allocate memory"), std::string::npos)
        << e.what_without_backtrace();
  }
}

}  // namespace
}  // namespace docmatch
