// cairn-train that pauses at a named point, for tests/train/signals.sh only (never installed): the tool's own command
// line (train_main) with TrainHooks::at waiting there for a stop signal, so a test signals at a moment it controls,
// never on a timer, and the real binary carries no test hooks.
// Environment: CAIRNTEST_TRAIN_PAUSE=<point> (a TrainHooks::at point: startup, first_step, last_step, finished,
// exit, ...); at that point the process creates ${CAIRNTEST_TRAIN_PAUSE_FILE}.<pid> and waits (at most 120 s) for
// SIGTERM/SIGUSR1; with CAIRNTEST_TRAIN_PAUSE_STEP=<n> only when that point comes with step n (e.g. step_done of
// step n: tests/slurm/cluster_nodefail_test.sh). (Environment rather than flags: slurm/run-local.sh builds the
// command line itself.)
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "trainer.h"

namespace {

void pause_for_signal(const std::string& point, const char* marker_prefix) {
  const std::string marker = std::string(marker_prefix) + "." + std::to_string(getpid());
  if (FILE* f = std::fopen(marker.c_str(), "w")) {
    std::fprintf(f, "%s\n", point.c_str());
    std::fclose(f);
  }
  for (int i = 0; i < 12000 && cairn::stop_signal() == 0; ++i) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
}

}  // namespace

int main(int argc, char** argv) {
  cairn::train::TrainHooks hooks;
  const char* want = std::getenv("CAIRNTEST_TRAIN_PAUSE");
  const char* file = std::getenv("CAIRNTEST_TRAIN_PAUSE_FILE");
  const char* step_env = std::getenv("CAIRNTEST_TRAIN_PAUSE_STEP");
  const int64_t want_step = step_env ? std::atoll(step_env) : -1;
  if (want && file) {
    const std::string point = want;
    hooks.at = [point, file, want_step](const std::string& at, int64_t step) {
      if (at == point && (want_step < 0 || step == want_step)) pause_for_signal(at, file);
    };
  }
  return cairn::train::train_main(argc, argv, hooks);
}
