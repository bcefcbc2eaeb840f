// One cairn-train per run directory: an exclusive flock on <run>/train/LOCK, held while the trainer lives.
#pragma once
#include <string>

namespace cairn::train {

// The lock of a run's train/ directory. Two trainers on one --out (a Slurm requeue racing the job it replaces, a
// second launch by mistake) would interleave checkpoints, pruning and metrics.jsonl; the second one must stop before
// it writes anything. flock() is released by the kernel when the holder dies, so a killed run leaves no stale lock
// (the file stays; its text only says who held it last).
class RunLock {
 public:
  RunLock() = default;
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  // Takes the lock on train_dir/LOCK (rank 0 only: the caller agrees on the outcome with the other ranks). Throws
  // RuntimeError (exit 1: the same command succeeds once the holder exits) naming the run directory and the holder's
  // pid, host and start time when another process holds it. A filesystem without flock support (e.g. Lustre mounted
  // without -o flock) is warned about and the run proceeds unlocked.
  void acquire(const std::string& train_dir, const std::string& run_dir);
  void release();
  static const char* file_name() { return "LOCK"; }

 private:
  int fd_ = -1;
};

}  // namespace cairn::train
