// HDF5 wrappers: typed round trips, hyperslabs, strings, attributes, provenance, clear errors.
#define BOOST_TEST_MODULE common_h5
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>

#include <unistd.h>
#include <csignal>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/h5.h"
#include "cairn/provenance.h"

using namespace cairn;
namespace fs = std::filesystem;

namespace {
std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("cairn_h5_" + std::to_string(getpid()) + "_" + name)).string();
}
}  // namespace

BOOST_AUTO_TEST_CASE(typed_round_trips) {
  std::string p = temp_path("rt.h5");
  std::vector<float> f = {1.5f, -2.25f, 3.0f};
  std::vector<uint16_t> u16(1000);
  std::iota(u16.begin(), u16.end(), 0);
  std::vector<uint64_t> u64 = {0, 1ull << 40, UINT64_MAX};
  std::vector<double> matrix(6, 0.5);
  {
    h5::File file = h5::File::create(p);
    file.write("floats", f);
    file.write("group/sub/u16", u16);
    file.write("u64", u64);
    file.write("matrix", matrix, {2, 3});
    file.write("empty", std::vector<int32_t>{});
    file.write_strings("names", {"alpha", "β", ""});
  }
  h5::File file = h5::File::open(p);
  BOOST_TEST(file.read<float>("floats") == f);
  BOOST_TEST(file.read<uint16_t>("group/sub/u16") == u16);
  BOOST_TEST(file.read<uint64_t>("u64") == u64);
  BOOST_TEST(file.read<int32_t>("empty").empty());
  BOOST_TEST(file.dataset("matrix").dims() == (std::vector<hsize_t>{2, 3}));
  BOOST_TEST(file.read_strings("names") == (std::vector<std::string>{"alpha", "β", ""}));
  BOOST_TEST(file.exists("group/sub/u16"));
  BOOST_TEST(!file.exists("group/nope/u16"));
  // Hyperslab and widening conversion (uint16 on disk read as uint32).
  h5::Dataset ds = file.dataset("group/sub/u16");
  BOOST_TEST(ds.read_range<uint32_t>(500, 3) == (std::vector<uint32_t>{500, 501, 502}));
  BOOST_TEST(ds.is_type(H5T_NATIVE_UINT16));
  BOOST_TEST(ds.contiguous_offset() > 0);
  BOOST_CHECK_THROW(ds.read_range<uint16_t>(999, 2), RuntimeError);
  fs::remove(p);
}

BOOST_AUTO_TEST_CASE(attributes_and_provenance) {
  std::string p = temp_path("attr.h5");
  provenance().tool = "cairn-test";
  provenance().command_line = "cairn-test --x 'a b'";
  provenance().config_toml = "[run]\ndir = \"x\"\n";
  {
    h5::File file = h5::File::create(p);
    file.set_attr("s", "text");
    file.set_attr("d", 2.5);
    file.set_attr("i", int64_t{-7});
    file.set_attr("u", uint64_t{0xFFFFFFFFFFFFFFFFull});
    file.set_attr("s", "replaced");
    h5::write_provenance(file);
  }
  h5::File file = h5::File::open(p);
  BOOST_TEST(file.attr_string("s") == "replaced");
  BOOST_TEST(file.attr_double("d") == 2.5);
  BOOST_TEST(file.attr_int("i") == -7);
  BOOST_TEST(file.attr_uint("u") == 0xFFFFFFFFFFFFFFFFull);
  BOOST_TEST(file.attr_string("tool") == "cairn-test");
  BOOST_TEST(file.attr_string("command_line") == "cairn-test --x 'a b'");
  BOOST_TEST(file.attr_string("config") == "[run]\ndir = \"x\"\n");
  BOOST_TEST(file.attr_string("git_sha").size() > 0u);
  auto names = file.attr_names();
  BOOST_TEST(names.size() == 11u);
  BOOST_CHECK_THROW(file.attr_string("missing"), RuntimeError);
  fs::remove(p);
}

BOOST_AUTO_TEST_CASE(open_errors_name_the_file) {
  try {
    h5::File::open("/nonexistent/x.h5");
    BOOST_FAIL("expected error");
  } catch (const RuntimeError& e) {
    BOOST_TEST(std::string(e.what()) == "cannot open \"/nonexistent/x.h5\": No such file or directory");
  }
  std::string p = temp_path("not.h5");
  atomic_write(p, "plain text, not HDF5");
  try {
    h5::File::open(p);
    BOOST_FAIL("expected error");
  } catch (const RuntimeError& e) {
    BOOST_TEST(std::string(e.what()) == "cannot open \"" + p + "\": not an HDF5 file");
  }
  fs::remove(p);
}

BOOST_AUTO_TEST_CASE(atomic_hdf5_file) {
  std::string p = temp_path("atomic.h5");
  {
    AtomicFile af(p);
    h5::File f = h5::File::create(af.temp_path());
    f.write("x", std::vector<int32_t>{1, 2, 3});
    f.close();
    af.commit();
  }
  BOOST_TEST(h5::File::open(p).read<int32_t>("x") == (std::vector<int32_t>{1, 2, 3}));
  fs::remove(p);
}

// HDF5 asks malloc for the sizes a flipped length gives (terabytes) and reports the NULL it gets as an error; ASan
// would abort the reader instead (the asan phase of CI). Only read by ASan builds.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }

// Every single-byte flip of a file's metadata (the attributes' object headers, their heap, the superblock,
// B-trees), read back through the accessors in a child process: a string the flip changed, or an error naming
// the file; never a crash or a hang (HDF5 1.10 itself segfaults on a flipped heap reference and loops on a
// flipped attribute message size, section "check_attribute_storage" in h5.h).
namespace {
enum Outcome { kRead = 0, kError = 1, kOther = 2 };

int read_every_attribute(const std::string& path) {
  try {
    h5::File f = h5::File::open(path);
    for (const h5::Location* loc : {static_cast<const h5::Location*>(&f)}) {
      for (const std::string& n : loc->attr_names()) {
        if (n.rfind("s_", 0) == 0) (void)loc->attr_string(n);
        else (void)loc->attr_int(n);
      }
    }
    h5::Dataset d = f.dataset("tokens");
    if (d.has_attr("xxh64")) (void)d.attr_string("xxh64");
    (void)d.read_all<uint16_t>();
    return kRead;
  } catch (const RuntimeError& e) {
    return std::string(e.what()).find(path) != std::string::npos ? kError : kOther;
  } catch (...) {
    return kOther;
  }
}
}  // namespace

BOOST_AUTO_TEST_CASE(flipped_metadata_bytes_fail_cleanly) {
  const std::string p = temp_path("flip_src.h5"), q = temp_path("flip.h5");
  {
    h5::File f = h5::File::create(p);
    for (const char* n : {"s_tokenizer", "s_plan_hash", "s_tool", "s_version", "s_git_sha", "s_host"})
      f.set_attr(n, std::string("value of ") + n);
    f.set_attr("s_config", std::string(300, 'c'));  // longer than the others: its own heap object size
    f.set_attr("s_empty", "");
    for (const char* n : {"vocab_size", "eot_id", "shard_index"}) f.set_attr(n, int64_t{7});
    h5::Dataset d = f.write("tokens", std::vector<uint16_t>(64, 5));
    d.set_attr("xxh64", "0123456789abcdef");
  }
  BOOST_TEST(read_every_attribute(p) == kRead);
  const std::string bytes = read_file(p);
  // The bytes that hold attributes: from the root group's header (the superblock before it is HDF5's to check)
  // to the end of the heap collection's objects (its free space after them is never read), and the dataset's
  // header; not the tokens.
  H5O_info_t root{}, tokens{};
  {
    h5::File f = h5::File::open(p);
    BOOST_TEST_REQUIRE(H5Oget_info2(f.id(), &root, H5O_INFO_BASIC) >= 0);
    BOOST_TEST_REQUIRE(H5Oget_info_by_name2(f.id(), "tokens", &tokens, H5O_INFO_BASIC | H5O_INFO_HDR, H5P_DEFAULT) >=
                       0);
  }
  const size_t heap = bytes.find("GCOL");
  BOOST_TEST_REQUIRE(heap != std::string::npos);
  size_t heap_end = heap + 16;  // objects: index (2), references (2), reserved (4), size (8), data padded to 8
  auto u16 = [&](size_t at) { return uint64_t(uint8_t(bytes[at])) | uint64_t(uint8_t(bytes[at + 1])) << 8; };
  auto u64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, bytes.data() + at, 8);
    return v;
  };
  while (heap_end + 16 <= bytes.size() && u16(heap_end) != 0) heap_end += 16 + (u64(heap_end + 8) + 7) / 8 * 8;
  heap_end += 16;  // the free-space object's header
  std::vector<size_t> flips;
  for (size_t i = root.addr; i < heap_end; ++i) flips.push_back(i);
  for (size_t i = tokens.addr; i < tokens.addr + tokens.hdr.space.total; ++i)
    if (i < root.addr || i >= heap_end) flips.push_back(i);
  BOOST_TEST_MESSAGE("flipping " << flips.size() << " of " << bytes.size() << " bytes");
  // One child reads flip after flip (a fork per flip would cost seconds) and reports each outcome on a pipe; one
  // that dies or hangs (SIGALRM) names its flip, and a new child goes on after it.
  int reads = 0, errors = 0;
  std::vector<std::string> bad;
  for (size_t next = 0; next < flips.size();) {
    int fds[2];
    BOOST_TEST_REQUIRE(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGALRM}) signal(sig, SIG_DFL);  // not Boost's
      for (size_t k = next; k < flips.size(); ++k) {
        std::string d = bytes;
        d[flips[k]] = static_cast<char>(d[flips[k]] ^ 0xFF);
        {
          std::ofstream out(q, std::ios::binary | std::ios::trunc);  // no fsync: thousands of variants
          out << d;
        }
        alarm(20);
        const char outcome = static_cast<char>(read_every_attribute(q));
        if (write(fds[1], &outcome, 1) != 1) _exit(3);
      }
      _exit(0);
    }
    close(fds[1]);
    char outcome;
    while (read(fds[0], &outcome, 1) == 1) {
      if (outcome == kRead) ++reads;
      else if (outcome == kError) ++errors;
      else bad.push_back("byte " + std::to_string(flips[next]) + ": an error not naming the file");
      ++next;
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (next < flips.size()) {  // the child ended inside flip `next`
      bad.push_back("byte " + std::to_string(flips[next]) +
                    (WIFSIGNALED(status) ? ": signal " + std::to_string(WTERMSIG(status))
                                         : ": exit " + std::to_string(WEXITSTATUS(status))));
      ++next;
    }
  }
  BOOST_TEST_MESSAGE("flips read " << reads << ", failed cleanly " << errors << ", bad " << bad.size());
  for (size_t i = 0; i < bad.size() && i < 20; ++i) BOOST_TEST_MESSAGE(bad[i]);
  BOOST_TEST(bad.empty());
  BOOST_TEST(errors > 100);  // the flips reach the checks (most header bytes matter)
  fs::remove(p);
  fs::remove(q);
}
