// docmatch::Error and DOCMATCH_CHECK: the stage and the sentence kept apart
// and joined in what(), the parts streamed as TORCH_CHECK streams them, and
// nothing evaluated or thrown while the condition holds.
#include "console/error.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace docmatch {
namespace {

TEST(Error, CarriesItsStageApartAndInWhat) {
  const Error error("ckpt", "'runs/a/step-4/model.pt' is missing");
  EXPECT_EQ(error.stage(), "ckpt");
  EXPECT_EQ(error.sentence(), "'runs/a/step-4/model.pt' is missing");
  EXPECT_STREQ(error.what(), "[ckpt] 'runs/a/step-4/model.pt' is missing");
  // A std::runtime_error to code that catches those.
  EXPECT_THROW(throw Error("data", "x"), std::runtime_error);
}

TEST(Error, CheckStreamsItsPartsWhenTheConditionFails) {
  const int64_t batch = 12;
  const double rate = 0.5;
  try {
    DOCMATCH_CHECK(batch < 8, "train", "--batch-size ", batch, " is above ", 8, " at rate ", rate);
    ADD_FAILURE() << "a false condition threw nothing";
  } catch (const Error& e) {
    EXPECT_EQ(e.stage(), "train");
    EXPECT_EQ(e.sentence(), "--batch-size 12 is above 8 at rate 0.5");
  }
}

TEST(Error, CheckEvaluatesNothingElseWhileTheConditionHolds) {
  int conditions = 0, parts = 0;
  const auto part = [&parts] {
    ++parts;
    return std::string("part");
  };
  DOCMATCH_CHECK(++conditions == 1, "data", part());
  EXPECT_EQ(conditions, 1);  // once, as an expression with side effects is
  EXPECT_EQ(parts, 0);       // the message is built only to be thrown
  // As one statement, it keeps an if without braces whole.
  bool reached = false;
  if (conditions == 1)
    DOCMATCH_CHECK(true, "data", "never");
  else
    reached = true;
  EXPECT_FALSE(reached);
}

}  // namespace
}  // namespace docmatch
