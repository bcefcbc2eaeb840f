// File helpers: atomic writes, whole-file reads, run-directory layout, clear path errors.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "cairn/stale_temps.h"

namespace cairn {

// Reads a whole file ("-" is stdin); throws RuntimeError `cannot read "path": reason`, UsageError when "-" names a
// standard input that was closed.
std::string read_file(const std::string& path);

// Started with stdin, stdout or stderr closed (`<&-`, a daemon's launcher), a process's first open() would get that
// descriptor, and a lock file would become "stdin" or receive the JSON meant for stdout. Called first thing by
// run_tool: puts /dev/null on a closed stdin or stderr and /dev/full on a closed stdout (writes fail), and remembers.
void guard_standard_streams();
bool standard_stream_closed(int fd);     // 0, 1 or 2: closed when the tool started
extern const char* const kStdoutClosed;  // the error for data meant for a closed stdout
// Throws UsageError when "-" (shown as `what`) asks for a standard input that was closed.
void require_open_stdin(const std::string& what);

// Raises the soft limit on open files to the hard one (run_tool, at start): a dataset of thousands of shards, each
// kept open, must not fail under a login shell's 1024 when the site allows more.
void raise_open_file_limit();
// Non-empty when this process is at (within a few of) its limit of open files: says so with the limit and how to
// raise it.
// A failed open is checked against it before being called a damaged file.
std::string open_file_limit_problem();

// Writes via a temp file in the same directory, fsync, rename, fsync of the directory: a crash at
// any moment leaves either the old file or the new one, never a torn one. "-" writes to stdout (write_to_stdout);
// an existing device or FIFO is written in place.
void atomic_write(const std::string& path, std::string_view content);

// Points `link` at `target`'s file: a hard link under a temp name renamed over `link` (a reader sees the old file or
// the new; a killed writer's temp is named as atomic_write's are, so remove_stale_temps finds it), or, where no link
// can be made (another filesystem, none supported), `content` written there with atomic_write.
void atomic_link_or_write(const std::string& target, const std::string& link, std::string_view content);

// Writes `content` to file descriptor `fd` (stdout, or the real stdout `--json -` saved), after whatever std::cout
// and stdio still hold. A reader that went away (`tool | head`, EPIPE) ends it quietly; another failure (a full disk)
// throws RuntimeError "cannot write to stdout: reason".
void write_to_stdout(std::string_view content, int fd = 1);

// Writes all of data to fd (retrying short writes and EINTR); throws RuntimeError `cannot write "path": reason`.
void write_all(int fd, const char* data, size_t size, const std::string& path);

// For writers that need a path (HDF5): write to temp_path(), then commit() renames over the target.
// Destroyed without commit() (an exception, a crash) the temp file is removed and the target kept.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  const std::string& temp_path() const { return temp_.path(); }
  const std::string& path() const { return path_; }
  void commit();  // fsync + rename + fsync dir

 private:
  std::string path_;
  TempName temp_;
  bool committed_ = false;
};

// Creates a directory and its parents; throws RuntimeError naming the path if impossible.
void ensure_dir(const std::string& path);

// The last component of a directory's path however it is spelled: "runs/a/", "runs/a/." and "runs/a" all give "a";
// ".", ".." and "x/.." name the directory they resolve to. Names outputs after a directory the user gave.
std::string dir_basename(const std::string& path);
// "<out>/<stage>" created if needed (e.g. run_subdir("runs/demo", "sweep")).
std::string run_subdir(const std::string& out, const std::string& stage);
// Throws UsageError (exit 2) if `dir` cannot be created or written to (checked before long work starts).
// A probe file is created and removed: permission bits do not stop root, a read-only mount or /proc does.
void check_writable_dir(const std::string& dir);
// Why `dir` could not be created (where missing) and written in later, "" if it can; creates nothing. Its nearest
// existing ancestor (or `dir` itself) must be a directory on a writable mount that this process may write in. For
// outputs made only once there is something to write, so that bad input leaves no directory behind.
std::string creatable_dir_problem(const std::string& dir);
// Throws UsageError (exit 2) naming `path` if an output file cannot be written there: its directory
// as for check_writable_dir, and the path itself must not be a directory. "-" (stdout) always passes.
void check_writable_file(const std::string& path);
bool path_exists(const std::string& path);
// Drops the whole pages inside [data, data + bytes) of a read-only file mapping from this process (MADV_DONTNEED):
// they stay in the page cache, but no longer count as its resident memory.
void release_mapped_range(const void* data, size_t bytes);
// fsync a file or directory by path (best effort for directories).
void fsync_path(const std::string& path);
// Renames atomically; throws RuntimeError naming both paths.
void rename_path(const std::string& from, const std::string& to);
std::string join_path(const std::string& a, const std::string& b);

}  // namespace cairn
