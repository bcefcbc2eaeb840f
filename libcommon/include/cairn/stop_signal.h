// Stop signals (SIGTERM, SIGUSR1: Slurm's time-limit or preemption warning; SIGINT: Ctrl-C) recorded for a long-running
// tool to act on at its next safe point: cairn-train checkpoints, cairn-sweep writes what it measured.
#pragma once

namespace cairn {

// Handlers that only record the signal (idempotent; they stay installed until the process exits). A second Ctrl-C
// means "now": the default action ends the process at once.
void install_stop_handlers();
int stop_signal();         // the last stop signal received (0: none)
void clear_stop_signal();  // the signal was acted on: the next run in this process starts clean
// "SIGTERM" for a signal number (SIG<n> for one without a name here).
const char* stop_signal_name(int sig);

}  // namespace cairn
