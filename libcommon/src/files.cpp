// Atomic writes, whole-file reads and run-directory helpers with path-naming errors.
#include "cairn/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>

#include "cairn/error.h"
#include "cairn/log.h"

namespace cairn {

namespace fs = std::filesystem;

namespace {
bool g_stream_closed[3] = {false, false, false};
}  // namespace

void guard_standard_streams() {
  for (int fd = 0; fd < 3; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    // The lowest free descriptor: this one, as the lower ones are open by now.
    int got = ::open(fd == 1 ? "/dev/full" : "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (got < 0 && fd == 1) got = ::open("/dev/null", O_WRONLY);  // a container without /dev/full
    if (got >= 0 && got != fd) {
      ::dup2(got, fd);
      ::close(got);
    }
    g_stream_closed[fd] = true;
  }
}

const char* const kStdoutClosed = "cannot write to stdout: it is closed (the tool was started with `>&-`)";

bool standard_stream_closed(int fd) { return fd >= 0 && fd < 3 && g_stream_closed[fd]; }

void require_open_stdin(const std::string& what) {
  if (standard_stream_closed(STDIN_FILENO))
    throw UsageError(what + " reads standard input, which is closed (started with `<&-`): give a file, or a pipe");
}

void raise_open_file_limit() {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);  // best effort: a refusal leaves the limit as it was
}

std::string open_file_limit_problem() {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return "";
  // Counted, not probed with one more open(): by the time a failure is examined, unwinding has closed the failed
  // reader's own descriptors. Within a few of the limit, the limit is the likely cause.
  size_t open_now = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++open_now;
    ::closedir(d);
  } else if (errno != EMFILE && errno != ENFILE) {
    return "";
  } else {
    open_now = lim.rlim_cur;
  }
  if (open_now + 16 < lim.rlim_cur) return "";
  return strprintf("this process has reached its limit of %llu open files (`ulimit -n`, hard limit %llu): raise it "
                   "in the job script, or use fewer, larger shards",
                   static_cast<unsigned long long>(lim.rlim_cur), static_cast<unsigned long long>(lim.rlim_max));
}

std::string read_file(const std::string& path) {
  if (path == "-") {
    require_open_stdin("\"-\"");
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw RuntimeError(errno_message("cannot read", path));
  struct stat st {};
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw RuntimeError(file_message("cannot read", path, "Is a directory"));
  }
  std::string out;
  // Reserved at the file's size (+1 to see end of file without growing): appending 64 KiB reads to an unreserved
  // string reallocated and re-faulted it about log2(size / 64 KiB) times, most of a report's time on long files.
  if (S_ISREG(st.st_mode) && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size) + 1);
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      throw RuntimeError(file_message("cannot read", path, std::strerror(e)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

namespace {
std::string parent_dir(const std::string& path) {
  fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}
}  // namespace

void write_all(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw RuntimeError(errno_message("cannot write", path));
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

std::string dir_basename(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  std::string name = p.filename().string();
  if (name.empty()) name = p.parent_path().filename().string();  // "a/" normalises to "a/": its parent's name
  if (name.empty() || name == "." || name == "..") {
    std::error_code ec;
    const fs::path whole = fs::absolute(path, ec).lexically_normal();
    name = whole.filename().string();
    if (name.empty()) name = whole.parent_path().filename().string();
  }
  return name;
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    throw RuntimeError("cannot rename \"" + from + "\" to \"" + to + "\": " + std::strerror(errno));
  }
}

void write_to_stdout(std::string_view content, int fd) {
  if (standard_stream_closed(STDOUT_FILENO) && !content.empty()) throw RuntimeError(kStdoutClosed);
  std::cout.flush();
  std::fflush(stdout);
  while (!content.empty()) {
    const ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE) return;  // nobody reads the rest: not a failure of the run (SIGPIPE is ignored)
      throw RuntimeError(std::string("cannot write to stdout: ") + std::strerror(errno));
    }
    content.remove_prefix(static_cast<size_t>(n));
  }
}

void atomic_write(const std::string& path, std::string_view content) {
  if (path == "-") {
    write_to_stdout(content);
    return;
  }
  // A device or a FIFO (--json /dev/null, a named pipe a script reads) is written in place: renaming a temp file over
  // it would replace it with a regular file (as root, /dev/null itself).
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw RuntimeError(errno_message("cannot write", path));
    try {
      write_all(fd, content.data(), content.size(), path);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    return;
  }
  std::string dir = parent_dir(path);
  if (!path_exists(dir)) ensure_dir(dir);
  const TempName temp_name(path);
  const std::string& temp = temp_name.path();
  // 0666 and the umask decide, as for every other file the tools write (a team's run directory under umask 002).
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) throw RuntimeError(errno_message("cannot write", path));
  try {
    write_all(fd, content.data(), content.size(), path);
    if (::fsync(fd) != 0) throw RuntimeError(errno_message("cannot sync", path));
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  ::close(fd);
  try {
    rename_path(temp, path);
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  fsync_path(dir);
}

void atomic_link_or_write(const std::string& target, const std::string& link, std::string_view content) {
  const TempName temp_name(link);
  const std::string& temp = temp_name.path();
  std::error_code ec;
  fs::create_hard_link(target, temp, ec);
  if (!ec) fs::rename(temp, link, ec);
  // rename() of two links to one file does nothing and keeps the temp: it goes either way (its name is this
  // process's own, so nothing else can be lost).
  std::error_code gone;
  fs::remove(temp, gone);
  if (ec) atomic_write(link, content);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), temp_(path_) {
  std::string dir = parent_dir(path_);
  if (!path_exists(dir)) ensure_dir(dir);
}

AtomicFile::~AtomicFile() {
  if (!committed_) ::unlink(temp_.path().c_str());
}

void AtomicFile::commit() {
  if (committed_) return;
  fsync_path(temp_.path());
  rename_path(temp_.path(), path_);
  committed_ = true;
  fsync_path(parent_dir(path_));
}

void ensure_dir(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) throw RuntimeError(file_message("cannot create directory", path, ec.message()));
  if (!fs::is_directory(path, ec)) throw RuntimeError(file_message("cannot create directory", path, "Not a directory"));
}

std::string run_subdir(const std::string& out, const std::string& stage) {
  std::string dir = join_path(out, stage);
  ensure_dir(dir);
  return dir;
}

void check_writable_dir(const std::string& dir) {
  // A user-chosen output directory that cannot be used is a usage error (exit 2), found before work starts.
  try {
    ensure_dir(dir);
  } catch (const RuntimeError& e) {
    throw UsageError(e.what());
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) throw UsageError(errno_message("cannot write to directory", dir));
  // access() says yes to root whatever the mode bits; creating a file is the real test.
  const TempName probe_name(join_path(dir, "write-probe"));
  const std::string& probe = probe_name.path();
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw UsageError(errno_message("cannot write to directory", dir));
  ::close(fd);
  ::unlink(probe.c_str());
}

std::string creatable_dir_problem(const std::string& dir) {
  std::error_code ec;
  fs::path p = dir.empty() ? "." : dir;
  fs::file_status st;
  while (!p.empty() && (st = fs::symlink_status(p, ec)).type() == fs::file_type::not_found) p = p.parent_path();
  if (p.empty()) p = ".";
  // A name too long, or an ancestor this user cannot search: the system's reason, not "Not a directory".
  if (ec && st.type() == fs::file_type::none)
    return std::string("\"").append(p.string()).append("\": ").append(ec.message());  // piecewise: GCC 12 -Wrestrict
  if (!fs::is_directory(p, ec)) return "Not a directory";
  struct statvfs fsinfo {};
  if (::statvfs(p.c_str(), &fsinfo) == 0 && (fsinfo.f_flag & ST_RDONLY))
    return std::string("\"")
        .append(p.string())
        .append("\" is on a read-only file system");  // piecewise: GCC 12 -Wrestrict
  if (::access(p.c_str(), W_OK | X_OK) != 0) return "cannot write in \"" + p.string() + "\": " + std::strerror(errno);
  return "";
}

void check_writable_file(const std::string& path) {
  if (path == "-") return;
  if (path.empty()) throw UsageError("an output file name is empty");
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw UsageError(file_message("cannot write", path, "Is a directory"));
  // A name the file system cannot hold failed only when the output was written, after the work.
  if (fs::path(path).filename().string().size() > 255)
    throw UsageError(file_message("cannot write", path, std::strerror(ENAMETOOLONG)));
  try {
    check_writable_dir(parent_dir(path));
  } catch (const UsageError& e) {
    throw UsageError(file_message("cannot write", path, e.what()));
  }
}

void release_mapped_range(const void* data, size_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  uintptr_t lo = reinterpret_cast<uintptr_t>(data), hi = lo + bytes;
  lo = (lo + page - 1) / page * page;
  hi = hi / page * page;
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return (fs::path(a) / b).string();
}

}  // namespace cairn
