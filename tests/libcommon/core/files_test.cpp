// Atomic writes survive a crash mid-write; read errors name the path and reason; an output directory's lock admits
// one holder and names it to the next; a killed writer's temp files go, a live one's and another host's stay.
#define BOOST_TEST_MODULE common_files
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "cairn/dir_lock.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/stale_temps.h"

using namespace cairn;
namespace fs = std::filesystem;

namespace {
std::string temp_dir() {
  std::string d = fs::temp_directory_path() / ("cairn_files_test_" + std::to_string(getpid()));
  fs::create_directories(d);
  return d;
}
}  // namespace

BOOST_AUTO_TEST_CASE(write_then_read) {
  std::string dir = temp_dir();
  std::string p = dir + "/a/b/c.txt";
  atomic_write(p, "hello");
  BOOST_TEST(read_file(p) == "hello");
  atomic_write(p, "world");
  BOOST_TEST(read_file(p) == "world");
  // No temp files left behind.
  int n = 0;
  for (auto& e : fs::directory_iterator(dir + "/a/b")) n += e.is_regular_file();
  BOOST_TEST(n == 1);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(read_errors_name_path_and_reason) {
  try {
    read_file("/nonexistent/cairn.txt");
    BOOST_FAIL("expected error");
  } catch (const RuntimeError& e) {
    BOOST_TEST(std::string(e.what()) == "cannot read \"/nonexistent/cairn.txt\": No such file or directory");
  }
}

BOOST_AUTO_TEST_CASE(killed_mid_write_leaves_old_file) {
  std::string dir = temp_dir();
  std::string p = dir + "/state.txt";
  atomic_write(p, "old contents");
  // A child writes 256 MiB and is killed while writing; the target must still hold the old contents.
  pid_t pid = fork();
  if (pid == 0) {
    std::string big(256u << 20, 'x');
    atomic_write(p, big);
    _exit(0);
  }
  usleep(30 * 1000);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  std::string now = read_file(p);
  // Either the write finished before the kill (whole new file) or the old file is intact: never torn.
  BOOST_TEST((now == "old contents" || now.size() == (256u << 20)));
  BOOST_TEST(WIFSIGNALED(status));
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(atomic_file_without_commit_keeps_target) {
  std::string dir = temp_dir();
  std::string p = dir + "/x.h5";
  atomic_write(p, "old");
  {
    AtomicFile f(p);
    FILE* fp = fopen(f.temp_path().c_str(), "w");
    fputs("partial", fp);
    fclose(fp);
    // destroyed without commit, e.g. by an exception
  }
  BOOST_TEST(read_file(p) == "old");
  {
    AtomicFile f(p);
    FILE* fp = fopen(f.temp_path().c_str(), "w");
    fputs("new", fp);
    fclose(fp);
    f.commit();
  }
  BOOST_TEST(read_file(p) == "new");
  fs::remove_all(dir);
}

namespace {
constexpr long kDeadPid = 2000000000;  // above any pid_max: no such process

// Sets `path`'s times to `age_seconds` ago (negative: in the future).
void set_age(const std::string& path, long age_seconds) {
  timespec times[2]{};
  clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= age_seconds;
  times[1] = times[0];
  BOOST_REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

// Plants a temp file `name` in `dir` last modified `age_seconds` ago.
void plant(const std::string& dir, const std::string& name, long age_seconds) {
  atomic_write(dir + "/" + name, "x");
  set_age(dir + "/" + name, age_seconds);
}

std::string temp_of(const std::string& file, const std::string& host, long pid) {
  return "." + file + ".tmp." + (host.empty() ? "" : host + ".") + std::to_string(pid) + ".1a2b3c";
}
}  // namespace

// The temps atomic_write, AtomicFile, atomic_link_or_write and ShardWriter write under: this host's short name
// reduced to [a-z0-9-], this pid, hex.
BOOST_AUTO_TEST_CASE(temp_names_carry_host_and_pid) {
  const std::string& host = temp_host_tag();
  BOOST_TEST(!host.empty());
  BOOST_TEST(host.size() <= 32u);
  BOOST_TEST(host != "tmp");
  for (char c : host) BOOST_TEST(((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'), host);
  const std::string dir = temp_dir() + "/names";
  fs::create_directories(dir);
  AtomicFile f(dir + "/x.h5");
  const std::string prefix = ".x.h5.tmp." + host + "." + std::to_string(getpid()) + ".";
  const std::string name = fs::path(f.temp_path()).filename().string();
  BOOST_TEST(name.rfind(prefix, 0) == 0u, name);
  BOOST_TEST(name.size() == prefix.size() + 6, name);
  fs::remove_all(dir);
}

// A temp goes when its writer is gone: no process has its pid; or the pid is this process's and the temp is not one
// this process is writing (a fresh pid namespace gave it the killed writer's pid); or the process now holding its pid
// started after the temp was last written. Another host's temps are not judged; other names are never touched.
BOOST_AUTO_TEST_CASE(stale_temps_go_live_and_other_hosts_stay) {
  const std::string dir = temp_dir() + "/stale";
  fs::create_directories(dir);
  const std::string host = temp_host_tag();
  const long me = getpid();
  const long hour = 3600;
  // A live process started now (blocked on a pipe until the end: no timing involved).
  int pipe_fds[2];
  BOOST_REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t child = fork();
  if (child == 0) {
    char c;
    ::close(pipe_fds[1]);
    while (::read(pipe_fds[0], &c, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
  }
  ::close(pipe_fds[0]);
  const bool proc_readable = fs::exists("/proc/" + std::to_string(child) + "/stat");

  const std::vector<std::string> gone = {
      temp_of("a", host, kDeadPid),  // dead writer of this host
      temp_of("b", "", kDeadPid),    // old format (no host), dead writer
      temp_of("c", host, me),        // this pid, not this process's temp, old
      temp_of("d", host, me),        // this pid, not this process's temp, written "in the future"
      temp_of("e", "", me),          // old format, this pid, not this process's
      temp_of("f.tmp.g", host, kDeadPid),
  };
  std::vector<std::string> kept = {
      temp_of("h", "other-node7", kDeadPid),  // another host's: its pid says nothing here
      temp_of("i", "other-node7", me),
      temp_of("j", host, child),        // a live writer: the process started before the temp was written
      temp_of("k", host, child),        // the same, last written "in the future"
      temp_of("l", "", child),          // old format, live writer
      temp_of("skip", host, kDeadPid),  // a file `wanted` does not accept
      "notes.txt",
      ".n.tmp",
      ".o.tmp." + std::to_string(kDeadPid),
      ".p.tmp.x." + std::to_string(kDeadPid) + ".zz",
      ".q.tmp.a_b." + std::to_string(kDeadPid) + ".1a",
      "r.tmp." + std::to_string(kDeadPid) + ".1a",
  };
  const std::string pid_reused = temp_of("s", host, child);  // the holder of the pid started after the last write
  const std::string old_pid_reused = temp_of("t", "", child);
  for (const auto& n : gone) plant(dir, n, n == temp_of("d", host, me) ? -hour : hour);
  for (const auto& n : kept) plant(dir, n, n == temp_of("k", host, child) ? -hour : 0);
  plant(dir, pid_reused, hour);
  plant(dir, old_pid_reused, hour);
  // This process's own temp at work, however old, stays.
  AtomicFile own(dir + "/u");
  {
    FILE* fp = fopen(own.temp_path().c_str(), "w");
    fputs("partial", fp);
    fclose(fp);
  }
  set_age(own.temp_path(), hour);
  kept.push_back(fs::path(own.temp_path()).filename().string());

  std::vector<std::string> asked;
  const size_t removed = remove_stale_temps(dir, [&asked](const std::string& file) {
    asked.push_back(file);
    return file != "skip";
  });
  ::close(pipe_fds[1]);
  int status = 0;
  ::waitpid(child, &status, 0);

  const size_t expected_gone = gone.size() + (proc_readable ? 2 : 0);
  BOOST_TEST(removed == expected_gone);
  for (const auto& n : gone) BOOST_TEST(!fs::exists(dir + "/" + n), n << " was kept");
  for (const auto& n : kept) BOOST_TEST(fs::exists(dir + "/" + n), n << " was removed");
  if (proc_readable) {
    BOOST_TEST(!fs::exists(dir + "/" + pid_reused));
    BOOST_TEST(!fs::exists(dir + "/" + old_pid_reused));
  } else {
    BOOST_TEST_MESSAGE("/proc unreadable: a temp whose pid runs is kept");
    BOOST_TEST(fs::exists(dir + "/" + pid_reused));
    BOOST_TEST(fs::exists(dir + "/" + old_pid_reused));
  }
  // The file a temp would replace, its name whole (dots and ".tmp" in it included).
  BOOST_TEST((std::find(asked.begin(), asked.end(), "f.tmp.g") != asked.end()));
  BOOST_TEST((std::find(asked.begin(), asked.end(), "notes.txt") == asked.end()));
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_locked_sweep_removes_every_host_s_temps_but_its_own) {
  // Under the directory's lock, before the run writes (cairn-train, cairn-reshard): a job requeued onto other nodes
  // removes what its killed predecessor left there, and another live process's temp of this host goes too.
  const std::string dir = temp_dir() + "/locked_sweep";
  fs::create_directories(dir);
  const std::string host = temp_host_tag();
  const std::vector<std::string> gone = {temp_of("a", "other-node7", kDeadPid), temp_of("b", "other-node7", 1),
                                         temp_of("c", host, kDeadPid), temp_of("d", "", 1),
                                         temp_of("e", host, getpid())};
  std::vector<std::string> kept = {temp_of("skip", "other-node7", kDeadPid), "notes.txt"};
  for (const auto& n : gone) plant(dir, n, 0);
  for (const auto& n : kept) plant(dir, n, 0);
  AtomicFile own(dir + "/u");  // this process's temp at work stays
  {
    FILE* fp = fopen(own.temp_path().c_str(), "w");
    fputs("partial", fp);
    fclose(fp);
  }
  kept.push_back(fs::path(own.temp_path()).filename().string());
  const size_t removed = remove_stale_temps(
      dir, [](const std::string& file) { return file != "skip"; }, StaleTempScope::Locked);
  BOOST_TEST(removed == gone.size());
  for (const auto& n : gone) BOOST_TEST(!fs::exists(dir + "/" + n), n << " was kept");
  for (const auto& n : kept) BOOST_TEST(fs::exists(dir + "/" + n), n << " was removed");
  // Without the lock the same other-node temp stays.
  plant(dir, gone[0], 0);
  BOOST_TEST(remove_stale_temps(dir, [](const std::string&) { return true; }) == 0u);
  BOOST_TEST(fs::exists(dir + "/" + gone[0]));
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(unwritable_output_dir_is_a_usage_error) {
  BOOST_CHECK_THROW(check_writable_dir("/proc/cairn_cannot_be_here"), UsageError);
}

// flock() locks belong to an open file description, so two DirLocks in one process contend as two processes would.
BOOST_AUTO_TEST_CASE(dir_lock_admits_one_holder_and_names_it) {
  const std::string dir = temp_dir() + "/locked";
  const std::string path = dir + "/LOCK";
  DirLock first;
  first.acquire(path, dir, "another tool is writing", "wait for it");  // creates dir and the file
  BOOST_TEST(first.held());
  BOOST_TEST(read_file(path).find("pid " + std::to_string(getpid()) + " on ") == 0);
  DirLock second;
  try {
    second.acquire(path, dir, "another tool is writing", "wait for it");
    BOOST_FAIL("a second holder was admitted");
  } catch (const RuntimeError& e) {
    const std::string msg = e.what();
    BOOST_TEST(msg.find("another tool is writing \"" + dir + "\": pid " + std::to_string(getpid())) == 0, msg);
    BOOST_TEST(msg.find("holds \"" + path + "\"; wait for it") != std::string::npos, msg);
  }
  BOOST_TEST(!second.held());
  // A bounded wait ends in the same error, no sooner than asked, saying how long it waited.
  const auto t0 = std::chrono::steady_clock::now();
  try {
    second.acquire(path, dir, "another tool is writing", "wait for it", 0.3);
    BOOST_FAIL("a second holder was admitted after waiting");
  } catch (const RuntimeError& e) {
    BOOST_TEST(std::string(e.what()).find("(waited 0.3 s); wait for it") != std::string::npos, e.what());
  }
  BOOST_TEST(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >= 0.3);
  // Released: the file stays, empty; the next holder gets it at once.
  first.release();
  BOOST_TEST(read_file(path).empty());
  second.acquire(path, dir, "another tool is writing", "wait for it");
  BOOST_TEST(second.held());
  second.release();
}

// A team's run directory (setgid, umask 002): the lock and atomically written files are group-writable like the
// HDF5 files, and a lock file someone else created read-only is still lockable (flock on a read-only descriptor).
BOOST_AUTO_TEST_CASE(files_follow_the_umask_and_a_read_only_lock_file_still_locks) {
  const std::string dir = temp_dir() + "/shared";
  const mode_t old_mask = ::umask(002);
  {
    DirLock lock;
    lock.acquire(dir + "/LOCK", dir, "busy", "later");
    atomic_write(dir + "/DONE", "x\n");
  }
  ::umask(old_mask);
  auto mode = [](const std::string& p) { return static_cast<unsigned>(fs::status(p).permissions() & fs::perms::all); };
  BOOST_TEST(mode(dir + "/LOCK") == 0664u);
  BOOST_TEST(mode(dir + "/DONE") == 0664u);
  fs::permissions(dir + "/LOCK", fs::perms(0444));
  const pid_t child = ::fork();
  if (child == 0) {
    // Root may open anything: become another user for the open to be refused, as it is for a teammate.
    if (::getuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
    try {
      DirLock other;
      other.acquire(dir + "/LOCK", dir, "busy", "later");
      ::_exit(other.held() ? 0 : 1);
    } catch (...) {
      ::_exit(2);
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 0);
  BOOST_TEST(read_file(dir + "/LOCK").empty());  // not truncated or written through the read-only descriptor
}

BOOST_AUTO_TEST_CASE(dir_lock_waiter_gets_it_once_the_holder_lets_go) {
  const std::string dir = temp_dir() + "/handover";
  DirLock holder, waiter;
  holder.acquire(dir + "/LOCK", dir, "busy", "later");
  // The wait is far longer than the hand-over takes: the outcome does not depend on when the thread runs.
  std::thread let_go([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    holder.release();
  });
  waiter.acquire(dir + "/LOCK", dir, "busy", "later", 600);
  let_go.join();
  BOOST_TEST(waiter.held());
}

// Outputs named after a directory (cairn-eval's lm-eval model name, convert's Megatron prefix, report run names) must
// not depend on how the path was spelled: "runs/a/" used to name nothing ("cairn") and "runs/a" name "a".
BOOST_AUTO_TEST_CASE(dir_basename_ignores_the_spelling) {
  for (const char* spelled : {"runs/a", "runs/a/", "runs/a//", "runs/a/.", "./runs/a", "runs/a/b/.."})
    BOOST_TEST(dir_basename(spelled) == "a", spelled);
  BOOST_TEST(dir_basename(".") == fs::current_path().filename().string());
  BOOST_TEST(dir_basename("..") == fs::current_path().parent_path().filename().string());
}
