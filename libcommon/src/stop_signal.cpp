// Stop signals recorded by async-signal-safe handlers; the tools poll stop_signal() at their safe points.
#include "cairn/stop_signal.h"

#include <csignal>

namespace cairn {

namespace {

volatile sig_atomic_t g_stop_signal = 0;
bool g_handlers_installed = false;

extern "C" void on_stop_signal(int sig) {
  if (sig == SIGINT && g_stop_signal == SIGINT) {
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
    return;
  }
  g_stop_signal = sig;
}

}  // namespace

void install_stop_handlers() {
  if (g_handlers_installed) return;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  g_handlers_installed = true;
}

int stop_signal() { return g_stop_signal; }
void clear_stop_signal() { g_stop_signal = 0; }

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    default: return "a stop signal";
  }
}

}  // namespace cairn
