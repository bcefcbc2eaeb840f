// cairn-train's run-directory lock (run_lock.h): flock on <run>/train/LOCK, the holder's pid and host written into it.
#include "run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/provenance.h"

namespace cairn::train {

namespace {
// The holder's line from the lock file ("" when it has not written it yet or it cannot be read).
std::string read_holder(int fd) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "";
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}
}  // namespace

RunLock::~RunLock() { release(); }

void RunLock::acquire(const std::string& train_dir, const std::string& run_dir) {
  release();
  const std::string path = join_path(train_dir, file_name());
  // O_CLOEXEC: a child process (a launcher's helper) must not keep the lock alive after this process ends.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw RuntimeError(errno_message("cannot open the run lock", path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      std::string holder = read_holder(fd);
      ::close(fd);
      if (holder.empty()) holder = "a process that has not recorded itself yet";
      throw RuntimeError(file_message("another cairn-train is running in", run_dir,
                                      holder + " holds \"" + path +
                                          "\"; stop it (or wait for it to exit) before starting another trainer on "
                                          "this run, or use another --out"));
    }
    ::close(fd);
    // Some parallel filesystems refuse flock unless mounted for it: running unlocked beats not running.
    if (err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK || err == EINVAL) {
      CAIRN_LOG_WARN("cannot lock \"%s\" (%s): this filesystem does not support flock; nothing stops a second "
                     "cairn-train on this run directory",
                     path.c_str(), std::strerror(err));
      return;
    }
    throw RuntimeError(file_message("cannot lock", path, std::strerror(err)));
  }
  fd_ = fd;
  // Who holds it, for the message of a trainer that finds it taken (the flock itself is what counts).
  const Provenance& prov = provenance();
  const std::string who = strprintf("pid %d on %s (started %s)\n", static_cast<int>(::getpid()),
                                    (prov.host.empty() ? hostname_string() : prov.host).c_str(),
                                    (prov.time_utc.empty() ? utc_now_iso8601() : prov.time_utc).c_str());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size()))
    CAIRN_LOG_WARN("cannot record the holder in \"%s\": %s", path.c_str(), std::strerror(errno));
}

void RunLock::release() {
  if (fd_ < 0) return;
  // Leave the file (deleting a flock file races with a process that opened it) but not a stale holder line.
  [[maybe_unused]] const int rc = ::ftruncate(fd_, 0);  // best effort: the lock goes with close() regardless
  ::close(fd_);
  fd_ = -1;
}

}  // namespace cairn::train
