// Atomic writes survive a crash mid-write; read errors name the path and reason; an output directory's lock admits
// one holder and names it to the next.
#define BOOST_TEST_MODULE common_files
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "cairn/dir_lock.h"
#include "cairn/error.h"
#include "cairn/files.h"

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
