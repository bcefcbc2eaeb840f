// The output-directory lock (dir_lock.h): flock on a file in the directory, the holder's pid and host written in it.
#include "cairn/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"

namespace cairn {

namespace {
// The holder's line from the lock file, for messages (a stand-in when it has not written it yet or it cannot be
// read).
std::string read_holder(int fd) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s(buf, static_cast<size_t>(std::max<ssize_t>(n, 0)));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "a process that has not recorded itself yet" : s;
}
}  // namespace

DirLock::~DirLock() { release(); }

void DirLock::acquire(const std::string& lock_path, const std::string& dir, const std::string& taken,
                      const std::string& advice, double wait_s) {
  release();
  const std::string parent = std::filesystem::path(lock_path).parent_path().string();
  if (!parent.empty()) ensure_dir(parent);
  // O_CLOEXEC: a child process (a launcher's helper) must not keep the lock alive after this process ends.
  // 0666 and the umask decide: a team's shared run directory (setgid, umask 002) must let a group member take the
  // lock after another member's run. A lock file someone else created without group write is still lockable:
  // flock needs only a descriptor, so it is opened read-only and the holder line is left alone.
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  bool writable = true;
  if (fd < 0 && errno == EACCES && path_exists(lock_path)) {
    fd = ::open(lock_path.c_str(), O_RDONLY | O_CLOEXEC);
    writable = false;
  }
  if (fd < 0) throw RuntimeError(errno_message("cannot open the lock file", lock_path));
  // Polled rather than a blocking flock(): a holder that is stopped (SIGSTOP, a suspended job) must end in an error
  // naming it, not in a wait without end.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  int err = 0;
  for (bool first = true; ::flock(fd, LOCK_EX | LOCK_NB) != 0; first = false) {
    err = errno;
    if (err != EWOULDBLOCK || std::chrono::steady_clock::now() >= deadline) break;
    if (first)
      CAIRN_LOG_INFO("waiting up to %.3g s for \"%s\", held by %s", wait_s, lock_path.c_str(), read_holder(fd).c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    err = 0;
  }
  if (err != 0) {
    if (err == EWOULDBLOCK) {
      const std::string holder = read_holder(fd);
      ::close(fd);
      const std::string waited = wait_s > 0 ? strprintf(" (waited %.3g s)", wait_s) : "";
      throw RuntimeError(file_message(taken, dir, holder + " holds \"" + lock_path + "\"" + waited + "; " + advice));
    }
    ::close(fd);
    // Some parallel filesystems refuse flock unless mounted for it: running unlocked beats not running.
    if (err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK || err == EINVAL) {
      CAIRN_LOG_WARN("cannot lock \"%s\" (%s): this filesystem does not support flock; nothing stops a second "
                     "writer of \"%s\"",
                     lock_path.c_str(), std::strerror(err), dir.c_str());
      return;
    }
    throw RuntimeError(file_message("cannot lock", lock_path, std::strerror(err)));
  }
  fd_ = fd;
  writable_ = writable;
  if (!writable) return;
  // Who holds it, for the message of a process that finds it taken (the flock itself is what counts).
  const Provenance& prov = provenance();
  const std::string who = strprintf("pid %d on %s (started %s)\n", static_cast<int>(::getpid()),
                                    (prov.host.empty() ? hostname_string() : prov.host).c_str(),
                                    (prov.time_utc.empty() ? utc_now_iso8601() : prov.time_utc).c_str());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size()))
    CAIRN_LOG_WARN("cannot record the holder in \"%s\": %s", lock_path.c_str(), std::strerror(errno));
}

void DirLock::release() {
  if (fd_ < 0) return;
  // Leave the file (deleting a flock file races with a process that opened it) but not a stale holder line.
  if (writable_ && ::ftruncate(fd_, 0) != 0) {
    // best effort: the lock goes with close() regardless
  }
  ::close(fd_);
  fd_ = -1;
}

void acquire_on_rank0(DirLock& lock, const std::string& lock_path, const std::string& dir, const std::string& taken,
                      const std::string& advice) {
  if (!mpi::initialized()) return lock.acquire(lock_path, dir, taken, advice);
  bool locked = true;
  std::string why;
  if (mpi::rank() == 0) try {
      lock.acquire(lock_path, dir, taken, advice);
    } catch (const Error& e) {
      locked = false;
      why = e.what();
    }
  mpi::agree_or_throw(locked, why, kExitRuntime);
}

}  // namespace cairn
