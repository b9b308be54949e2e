// The progress bar's numbers: rates that never read as 0/s, and a resumed
// run's earlier steps kept out of its rate (console/progress.h).
#include "console/progress.h"

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>

namespace docmatch::console {
namespace {

TEST(HumanRate, SlowRatesKeepTwoDecimalsFastOnesAreShort) {
  EXPECT_EQ(HumanRate(0.07), "0.07");  // a 14 s step: was printed "0"
  EXPECT_EQ(HumanRate(1.1), "1.10");
  EXPECT_EQ(HumanRate(0.004), "4.0e-03");
  EXPECT_EQ(HumanRate(12.3), "12");
  EXPECT_EQ(HumanRate(2.57e6), "2.57M");
  EXPECT_EQ(HumanRate(0.0), "--");
}

// The rate of the final line, in units per second.
double PrintedRate(const std::string& line) {
  std::smatch match;
  EXPECT_TRUE(std::regex_search(line, match, std::regex(R"(([0-9.]+(?:e-?[0-9]+)?)(K|M)? steps/s)"))) << line;
  double rate = std::stod(match[1].str());
  if (match[2] == "K") rate *= 1e3;
  if (match[2] == "M") rate *= 1e6;
  return rate;
}

TEST(ProgressBar, AResumedRunsEarlierStepsAreNotInItsRate) {
  ::testing::internal::CaptureStderr();
  {
    ProgressBar bar("[train] step", 2000, "steps");
    bar.Resume(1000);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    bar.Add(2);
    bar.Finish();
  }
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("1002/2000 steps"), std::string::npos) << out;
  // 2 steps in about 0.1 s: about 20/s, not the 10,000/s that counting the
  // resumed 1,000 would print.
  const double rate = PrintedRate(out);
  EXPECT_GT(rate, 1.0) << out;
  EXPECT_LT(rate, 25.0) << out;
}

}  // namespace
}  // namespace docmatch::console
