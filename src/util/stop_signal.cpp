#include "util/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace combiner::util {

namespace {

std::atomic<int> requested{0};

extern "C" void on_stop_signal(int signal) {
  int expected = 0;
  if (!requested.compare_exchange_strong(expected, signal)) {
    // Second signal: leave now. Only async-signal-safe calls here.
    static const char message[] = "\nsecond signal: exiting without a checkpoint\n";
    (void)!write(STDERR_FILENO, message, sizeof(message) - 1);
    _exit(128 + signal);
  }
  static const char message[] =
      "\nstop requested: finishing this step and writing a checkpoint (signal again to exit "
      "now)\n";
  (void)!write(STDERR_FILENO, message, sizeof(message) - 1);
}

}  // namespace

void install_stop_handlers() {
  requested = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // interrupted reads and writes resume rather than fail
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int stop_requested() {
  return requested.load();
}

}  // namespace combiner::util
