// HDF5 wrappers: typed round trips, hyperslabs, strings, attributes, provenance, clear errors.
#define BOOST_TEST_MODULE common_h5
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
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
