// cairn-plan calibrate --from-runs: refits the cost model's efficiency terms to the per-phase step times that
// finished cairn-train runs logged, writes the refitted cluster file and reports leave-one-out prediction error.
#pragma once
#include <string>
#include <vector>

#include "cairn/config.h"

namespace cairn::plan {

struct RefitOptions {
  std::vector<std::string> runs;  // run directories (each with train/metrics.jsonl)
  std::string output;             // "" = <out>/plan/cluster-refit.toml
  std::string json_path;          // --json: the table, factors and provenance as JSON ("-" = stdout)
  int warmup_steps = 3;           // steps of each run's last start left out (allocator, caches, thread pools)
};

// The whole subcommand: reads the runs (UsageError naming a directory that is not a usable run), fits the
// factors on all of them, prints the leave-one-out table, writes the cluster file. Returns the exit code.
int run_calibrate_from_runs(const Config& cfg, const RefitOptions& opts);

}  // namespace cairn::plan
