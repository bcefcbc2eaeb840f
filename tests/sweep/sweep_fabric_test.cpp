// fabric.toml with several types and ops: [<tier>.<collective>] stays the one model cairn-plan
// reads (first requested type/op, or the first valid fit), every type/op gets a sub-table, and
// cairn-plan's own reader (libcommon costmodel) accepts the file and takes the primary table.
#define BOOST_TEST_MODULE sweep_fabric
#include <boost/test/unit_test.hpp>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "cairn/config.h"
#include "cairn/costmodel.h"
#include "sweep.h"

using namespace cairn::sweep;

namespace {

Block block(const std::string& tier, const std::string& coll, DataType t, RedOp op, double alpha, double busbw,
            bool valid = true) {
  Block b;
  b.tier = tier;
  b.collective = coll;
  b.type = t;
  b.op = op;
  b.nranks = 2;
  b.fit.valid = valid;
  b.fit.alpha_us = alpha;
  b.fit.busbw_gbps = busbw;
  b.fit.r2 = 0.99;
  b.fit.peak_busbw_gbps = busbw * 0.9;
  b.fit.half_peak_bytes = 4096;
  if (!valid) b.fit.note = "too few sizes";
  return b;
}

std::vector<Block> sample_blocks() {
  return {
      block("world", "allreduce", DataType::Float32, RedOp::Sum, 3.0, 10.0),
      block("world", "allreduce", DataType::Float32, RedOp::Max, 3.5, 9.0),
      block("world", "allreduce", DataType::Int32, RedOp::Sum, 4.0, 8.0),
      // intra: the preferred float32/sum fit is invalid, so int32/sum becomes the primary table.
      block("intra", "allreduce", DataType::Float32, RedOp::Sum, 0, 0, false),
      block("intra", "allreduce", DataType::Int32, RedOp::Sum, 1.5, 40.0),
      block("world", "allgather", DataType::Int32, RedOp::None, 2.5, 11.0),
      block("world", "allgather", DataType::Float32, RedOp::None, 2.0, 12.0),
  };
}

RunInfo sample_info() {
  RunInfo info;
  info.opts.types = {DataType::Float32, DataType::Int32};
  info.opts.ops = {RedOp::Sum, RedOp::Max};
  info.backend = "mpi";
  info.ranks.resize(2);
  return info;
}

std::string write_temp(const std::string& text) {
  std::string path = std::filesystem::temp_directory_path() / ("sweep_fabric_" + std::to_string(getpid()) + ".toml");
  std::ofstream(path) << text;
  return path;
}

}  // namespace

BOOST_AUTO_TEST_CASE(primary_block_is_first_type_and_op_or_first_valid) {
  std::vector<Block> b = sample_blocks();
  mark_fabric_blocks(b, DataType::Float32, RedOp::Sum);
  std::vector<bool> want = {true, false, false, false, true, false, true};
  for (size_t i = 0; i < b.size(); ++i) BOOST_TEST(b[i].in_fabric == want[i], "block " << i);
}

BOOST_AUTO_TEST_CASE(every_type_and_op_has_a_sub_table) {
  SweepResult r;
  r.blocks = sample_blocks();
  mark_fabric_blocks(r.blocks, DataType::Float32, RedOp::Sum);
  std::string path = write_temp(fabric_toml(sample_info(), r));
  cairn::json f = cairn::read_toml_file_as_json(path);
  const auto& wa = f["world"]["allreduce"];
  BOOST_TEST(wa["alpha_us"].get<double>() == 3.0);
  BOOST_TEST(wa["busbw_gbps"].get<double>() == 10.0);
  BOOST_TEST(wa["type"].get<std::string>() == "float");
  BOOST_TEST(wa["redop"].get<std::string>() == "sum");
  BOOST_TEST(wa["float"]["sum"]["busbw_gbps"].get<double>() == 10.0);
  BOOST_TEST(wa["float"]["max"]["alpha_us"].get<double>() == 3.5);
  BOOST_TEST(wa["int32"]["sum"]["busbw_gbps"].get<double>() == 8.0);
  BOOST_TEST(wa["int32"]["sum"]["ranks"].get<int>() == 2);
  const auto& ia = f["intra"]["allreduce"];
  BOOST_TEST(ia["type"].get<std::string>() == "int32");
  BOOST_TEST(ia["busbw_gbps"].get<double>() == 40.0);
  BOOST_TEST(!ia.contains("float"));  // the invalid fit has no table, only a note
  bool noted = false;
  for (const auto& s : f["fabric"]["skipped"]) noted |= s.get<std::string>().rfind("intra.allreduce.float.sum", 0) == 0;
  BOOST_TEST(noted);
  // Non-reducing collectives: one level, [<tier>.<collective>.<type>].
  const auto& wg = f["world"]["allgather"];
  BOOST_TEST(wg["busbw_gbps"].get<double>() == 12.0);
  BOOST_TEST(wg["int32"]["busbw_gbps"].get<double>() == 11.0);
  BOOST_TEST(wg["float"]["alpha_us"].get<double>() == 2.0);
  std::filesystem::remove(path);
}

// One type/op measured twice in a tier (a collective or type repeated in the config) where only the second fit is
// valid: its sub-table and [<tier>.<collective>] both hold the second fit, it is not listed as skipped, and a note
// says which measurement the table holds. The first fit used to be listed as skipped while the second filled
// [world.allreduce] alone, without its sub-table.
BOOST_AUTO_TEST_CASE(a_repeated_type_and_op_holds_its_first_valid_fit) {
  SweepResult r;
  r.blocks = {block("world", "allreduce", DataType::Float32, RedOp::Sum, 0, 0, false),
              block("world", "allreduce", DataType::Float32, RedOp::Sum, 2.0, 20.0),
              block("world", "allreduce", DataType::Float32, RedOp::Sum, 4.0, 30.0)};
  r.fabric_notes = mark_fabric_blocks(r.blocks, DataType::Float32, RedOp::Sum);
  BOOST_TEST(!r.blocks[0].in_sub_table);
  BOOST_TEST((r.blocks[1].in_sub_table && r.blocks[1].in_fabric));
  BOOST_TEST((!r.blocks[2].in_sub_table && !r.blocks[2].in_fabric));
  BOOST_REQUIRE(r.fabric_notes.size() == 1u);
  BOOST_TEST(r.fabric_notes[0] ==
             "fabric.toml [world.allreduce.float.sum]: measured 3 times (float sum, float sum, float sum); it holds "
             "measurement 2, the first with a valid fit");
  std::string path = write_temp(fabric_toml(sample_info(), r));
  cairn::json f = cairn::read_toml_file_as_json(path);
  const auto& wa = f["world"]["allreduce"];
  BOOST_TEST(wa["busbw_gbps"].get<double>() == 20.0);
  BOOST_TEST(wa["float"]["sum"]["busbw_gbps"].get<double>() == 20.0);
  BOOST_TEST(!f["fabric"].contains("skipped"));
  BOOST_TEST(f["fabric"]["notes"] == cairn::json(r.fabric_notes));
  cairn::costmodel::Cluster c;  // cairn-plan's reader takes the file with its notes
  cairn::costmodel::apply_fabric(c, path);
  BOOST_TEST(c.intra.fitted[static_cast<int>(cairn::costmodel::Collective::AllReduce)].busbw_gbps == 20.0);
  std::filesystem::remove(path);
  // None valid: skipped once, with the first one's reason, and no table.
  for (auto& b : r.blocks) b.fit.valid = false, b.fit.note = "too few sizes";
  r.fabric_notes = mark_fabric_blocks(r.blocks, DataType::Float32, RedOp::Sum);
  BOOST_TEST(r.fabric_notes[0].find("none with a valid fit") != std::string::npos);
  path = write_temp(fabric_toml(sample_info(), r));
  f = cairn::read_toml_file_as_json(path);
  BOOST_TEST(!f.contains("world"));
  BOOST_TEST(f["fabric"]["skipped"] == cairn::json({"world.allreduce.float.sum: too few sizes"}));
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(cairn_plan_reader_takes_the_primary_tables) {
  SweepResult r;
  r.blocks = sample_blocks();
  mark_fabric_blocks(r.blocks, DataType::Float32, RedOp::Sum);
  std::string path = write_temp(fabric_toml(sample_info(), r));
  cairn::costmodel::Cluster c;
  cairn::costmodel::apply_fabric(c, path);
  BOOST_TEST(c.has_fabric);
  // One node: world fits describe the intra tier only where intra has none (intra wins).
  const auto& ar = c.intra.fitted[static_cast<int>(cairn::costmodel::Collective::AllReduce)];
  BOOST_TEST(ar.valid);
  BOOST_TEST(ar.busbw_gbps == 40.0);
  BOOST_TEST(ar.alpha_us == 1.5);
  std::filesystem::remove(path);
}
