// The one error type of what a user gave or asked for: the stage that found
// the fault ("data", "ckpt", "train", "search", ...) and a sentence that says
// what is wrong and what to do. what() reads "[stage] sentence", as the log
// lines of that stage do; main prints it after the command's name, and
// dist::RunOnAllRanks after the rank's.
//
// DOCMATCH_CHECK(condition, stage, parts...) throws one where a condition
// that input can break does not hold: the parts are streamed together as
// TORCH_CHECK's are. TORCH_CHECK stays for what no input can reach (a
// tensor's shape inside a kernel); glog's CHECK, which aborts, is not used.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace docmatch {

class Error : public std::runtime_error {
 public:
  Error(std::string stage, const std::string& sentence)
      : std::runtime_error("[" + stage + "] " + sentence), stage_(std::move(stage)), sentence_(sentence) {}
  // "data", without the brackets.
  const std::string& stage() const { return stage_; }
  // what() without the stage.
  const std::string& sentence() const { return sentence_; }

 private:
  std::string stage_;
  std::string sentence_;
};

// Throws Error(stage, the parts written one after another).
template <typename... Parts>
[[noreturn]] void Fail(const std::string& stage, const Parts&... parts) {
  std::ostringstream sentence;
  (sentence << ... << parts);
  throw Error(stage, sentence.str());
}

}  // namespace docmatch

#define DOCMATCH_CHECK(condition, stage, ...) \
  do {                                        \
    if (!(condition)) {                       \
      ::docmatch::Fail((stage), __VA_ARGS__); \
    }                                         \
  } while (false)
