// One writer per output directory: an exclusive flock on a file in it, held while the tool lives (cairn-train's
// run, cairn-reshard's dataset).
#pragma once
#include <string>

namespace cairn {

// Two processes writing one directory (a Slurm requeue racing the job it replaces, a second launch by mistake)
// would interleave what they write and delete each other's temp files; the second must stop before it writes
// anything. flock() is released by the kernel when the holder dies, so a killed run leaves no stale lock (the
// file stays; its text only says who held it last).
class DirLock {
 public:
  DirLock() = default;
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  // Takes the lock on lock_path (created if missing, with its directory). When another process holds it, throws
  // RuntimeError (exit 1: the same command succeeds once the holder exits): `<taken> "<dir>": pid P on HOST
  // (started T) holds "<lock_path>"; <advice>`. A filesystem without flock support (e.g. Lustre mounted without
  // -o flock) is warned about and the caller proceeds unlocked. wait_s > 0: waits up to that long for the holder to
  // let go (for locks held over a short update, not a whole run).
  void acquire(const std::string& lock_path, const std::string& dir, const std::string& taken,
               const std::string& advice, double wait_s = 0);
  void release();
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  bool writable_ = true;  // false: opened read-only (another user's file), the holder line not ours to write
};

// acquire() on rank 0 only (lock files live on shared storage); every rank of MPI_COMM_WORLD then agrees, so a
// taken lock ends every rank with rank 0's message (exit 1). Without MPI initialised: acquire() itself.
void acquire_on_rank0(DirLock& lock, const std::string& lock_path, const std::string& dir, const std::string& taken,
                      const std::string& advice);

}  // namespace cairn
