// Ctrl-C between units of work (interrupt.h).
#include "console/interrupt.h"

#include <csignal>
#include <cstring>
#include <string>

namespace docmatch::console {
namespace {

volatile std::sig_atomic_t requested = 0;
bool installed = false;

extern "C" void OnInterrupt(int number) {
  if (requested != 0) {  // a second signal: at once
    std::signal(number, SIG_DFL);
    std::raise(number);
    return;
  }
  requested = number;
}

}  // namespace

Interrupted::Interrupted(int signal)
    : std::runtime_error(std::string("interrupted by ") + (signal == SIGINT ? "Ctrl-C (SIGINT)" : strsignal(signal)) +
                         ": stopped before the end"),
      signal_(signal) {}

bool InterruptHandlersInstalled() { return installed; }

void InstallInterruptHandlers() {
  installed = true;
  struct sigaction action {};
  action.sa_handler = OnInterrupt;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int number : {SIGINT, SIGTERM}) ::sigaction(number, &action, nullptr);
}

bool InterruptRequested() { return requested != 0; }
int InterruptSignal() { return requested; }

HoldInterrupts::HoldInterrupts() {
  sigset_t held;
  sigemptyset(&held);
  sigaddset(&held, SIGINT);
  sigaddset(&held, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &held, &previous_);
}

HoldInterrupts::~HoldInterrupts() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

void StopIfInterrupted() {
  if (requested != 0) throw Interrupted(requested);
}

}  // namespace docmatch::console
