// What a user is shown of an error (dist/runtime.h, ErrorMessage): a
// libtorch check's message without the C++ backtrace libtorch appends, the
// whole of it with --verbose (ShowBacktraces), other errors as they are.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "dist/runtime.h"

namespace docmatch::dist {
namespace {

TEST(ErrorMessage, LibtorchsBacktraceOnlyWhenAskedFor) {
  try {
    TORCH_CHECK(false, "[embed] the message");
    FAIL() << "TORCH_CHECK(false) did not throw";
  } catch (const std::exception& e) {
    const std::string whole = e.what();
    ASSERT_NE(whole.find("Exception raised from"), std::string::npos) << "no backtrace to strip: " << whole;
    ShowBacktraces(false);
    const std::string shown = ErrorMessage(e);
    EXPECT_EQ(shown.rfind("[embed] the message", 0), 0u) << shown;
    EXPECT_EQ(shown.find("Exception raised from"), std::string::npos) << shown;
    ShowBacktraces(true);
    EXPECT_EQ(ErrorMessage(e), whole);
    ShowBacktraces(false);
  }
  EXPECT_EQ(ErrorMessage(std::invalid_argument("[data] plain")), "[data] plain");
}

}  // namespace
}  // namespace docmatch::dist
