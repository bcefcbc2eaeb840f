// Atomic writes survive a crash mid-write; read errors name the path and reason.
#define BOOST_TEST_MODULE common_files
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

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
