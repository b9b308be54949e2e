// Ctrl-C for the commands that are not training runs (embed, encode, index,
// eval, prepare, inspect --verify, search): the first SIGINT or SIGTERM asks
// the command's loop to stop at its next check (each batch, each block of
// vectors, each query batch: well under a second apart), the work is
// abandoned as on any error (staged and partial files removed by the writers'
// own clean-up), and main exits 128 + the signal (130 for Ctrl-C). A second
// signal ends the process at once, the signal's default action.
//
// Training runs install their own handlers (train/training_run.h), which
// checkpoint before they stop.
#pragma once

#include <signal.h>

#include <stdexcept>

namespace docmatch::console {

// Thrown at a check after a stop signal.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(int signal);
  int signal() const { return signal_; }

 private:
  int signal_;
};

// SIGINT and SIGTERM set the request (the first; a second kills). A request
// that came before (under handlers set earlier) is kept.
void InstallInterruptHandlers();
// Whether InstallInterruptHandlers ran (commands that never check the
// request keep the default action: Ctrl-C ends them at once).
bool InterruptHandlersInstalled();
// Holds SIGINT and SIGTERM back while alive (a library's start-up, MPI's,
// that may set handlers of its own or swallow them), then lets a signal
// that came meanwhile through to the handlers set by then.
class HoldInterrupts {
 public:
  HoldInterrupts();
  ~HoldInterrupts();
  HoldInterrupts(const HoldInterrupts&) = delete;
  HoldInterrupts& operator=(const HoldInterrupts&) = delete;

 private:
  sigset_t previous_;
};
// Whether a stop signal has come, and which (0: none); safe from any thread.
bool InterruptRequested();
int InterruptSignal();
// Throws Interrupted when one has come: called between units of work on the
// thread that owns the command.
void StopIfInterrupted();

}  // namespace docmatch::console
