// cairn-sweep's outputs: the nccl-tests text table, the JSON (nccl-tests -J fields plus tiers and
// fits), sweep.h5 and fabric.toml for cairn-plan.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "cairn/config.h"
#include "cairn/files.h"
#include "cairn/h5.h"
#include "cairn/log.h"
#include "cairn/provenance.h"
#include "cairn/records.h"
#include "sweep.h"

namespace cairn::sweep {

std::string float_column(double value, int width) {
  // nccl-tests' getFloatStr: two decimals if they fit in the column, else one, else none, else an
  // exponent (one decimal from 7 characters up); what does not fit is cut at the column width.
  for (const char* fmt : {"%*.2f", "%*.1f", "%*.0f"}) {
    std::string t = strprintf(fmt, width, value);
    if (static_cast<int>(t.size()) <= width) return t;
  }
  std::string t = strprintf(width >= 7 ? "%*.1e" : "%*.0e", width, value);
  return t.substr(0, static_cast<size_t>(width));
}

namespace {

// The JSON documents keep their keys in the order they are written (nccl-tests' order, then the table's columns),
// where nlohmann::json would sort them.
using ojson = nlohmann::ordered_json;

std::string root_column(int root) { return strprintf("%6i", root); }

// The op column: nccl-tests prints the -o op for reducing collectives and for sendrecv.
const char* redop_column(const Block& b) { return op_name(b.op); }

// The op a fit is filed under in fabric.toml and the fits list: none for non-reducing collectives.
const char* fit_redop(const Block& b) {
  for (const auto& c : collectives()) {
    if (b.collective == c.name) return c.reducing ? op_name(b.op) : "none";
  }
  return op_name(b.op);
}

std::string fit_name(const Block& b) {
  std::string n = std::string("Fit ") + type_info(b.type).name;
  if (b.op != RedOp::None) n += std::string(" ") + op_name(b.op);
  if (b.root >= 0) n += strprintf(" root %d", b.root);
  return n;
}

}  // namespace

// nccl-tests' format version this output follows (its NCCL_TESTS_VERSION).
const char* const kNcclTestsFormatVersion = "2.19.6";

std::string format_preamble(const RunInfo& info) {
  std::string s;
  s += strprintf("# nccl-tests version %s nccl-headers=%d nccl-library=%d\n", kNcclTestsFormatVersion,
                 info.nccl_version, info.nccl_version);
  s += strprintf("# cairn-sweep version %s (git %s) backend %s: %s\n", cairn_version().c_str(), cairn_git_sha().c_str(),
                 info.backend.c_str(), info.backend_version.c_str());
  // Who ran it, as every cairn result says (the effective config is in sweep.json, sweep.h5 and fabric.toml): a
  // comment line, which nccl-tests' readers skip like the rest of the preamble.
  // Control characters (a newline inside a quoted argument) are escaped: the line must stay one comment line.
  const Provenance& p = provenance();
  s += strprintf("# cairn-sweep run %s on %s: %s\n", p.time_utc.c_str(), p.host.c_str(),
                 printable_text(p.command_line).c_str());
  return s;
}

std::string format_section_header(const RunInfo& info, const std::string& perf_name) {
  const SweepOptions& o = info.opts;
  std::string s;
  s += strprintf("# Collective test starting: %s\n", perf_name.c_str());
  s += strprintf("# nThread 1 nGpus 1 minBytes %llu maxBytes %llu step: %llu(%s) warmup iters: %d iters: %d "
                 "agg iters: %d validation: %d graph: 0 unalign: 0\n",
                 static_cast<unsigned long long>(o.minbytes), static_cast<unsigned long long>(o.maxbytes),
                 static_cast<unsigned long long>(o.stepfactor > 1 ? o.stepfactor : o.stepbytes),
                 o.stepfactor > 1 ? "factor" : "bytes", o.warmup, o.iters, o.agg_iters, o.check);
  if (o.blocking == 1) s += "# Blocking Enabled: wait and barrier after each inner iteration (-m) \n";
  if (o.blocking == 2) s += "# Blocking Enabled: wait after each inner iteration (-m), no barrier \n";
  if (o.blocking == 3)
    s += "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier \n";
  if (o.mpi_nonblocking) s += "# MPI calls: non-blocking (each MPI_I* call waited for; sweep.mpi_nonblocking)\n";
  s += "#\n# Using devices\n";
  for (const auto& r : info.ranks) {
    s += strprintf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s\n", r.rank, r.group, r.pid, r.host.c_str(),
                   r.device.device, r.device.bus_id.c_str(), r.device.name.c_str());
  }
  const char* time = o.report_cputime ? "cputime" : "time";
  s += "#\n";
  s += strprintf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "",
                 "", "", "", "");
  s += strprintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "size", "count", "type",
                 "redop", "root", time, "algbw", "busbw", "#wrong", time, "algbw", "busbw", "#wrong", 0, "");
  s += strprintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "(B)", "(elements)", "",
                 "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", 0, "");
  return s;
}

namespace {
std::string measure_columns(const Measure& m, double time_us) {
  std::string s = strprintf("  %7s  %6s  %6s", float_column(time_us, 7).c_str(), float_column(m.algbw, 6).c_str(),
                            float_column(m.busbw, 6).c_str());
  if (m.checked) s += strprintf("  %6g", static_cast<double>(m.wrong));
  else s += "    N/A";
  return s;
}
}  // namespace

std::string format_row(const Row& r, const Block& b, bool report_cputime) {
  std::string s = strprintf("%12llu  %12llu  %8s  %6s  %6s", static_cast<unsigned long long>(r.size),
                            static_cast<unsigned long long>(r.count), type_info(b.type).name, redop_column(b),
                            root_column(b.root).c_str());
  s += measure_columns(r.oop, report_cputime ? r.oop_cpu_us : r.oop.time_us);
  s += measure_columns(r.ip, report_cputime ? r.ip_cpu_us : r.ip.time_us);
  return s + "\n";
}

double section_avg_busbw(const std::vector<const Block*>& blocks) {
  double sum = 0;
  size_t n = 0;
  for (const Block* b : blocks) {
    for (const auto& r : b->rows) sum += r.oop.busbw + r.ip.busbw, n += 2;
  }
  return n ? sum / static_cast<double>(n) : 0.0;
}

std::string format_section_footer(const std::vector<const Block*>& blocks, double min_busbw) {
  // nccl-tests' count: failed checks (a rank and placement each), not wrong elements (the #wrong column has those).
  int64_t failed = 0;
  for (const Block* b : blocks) failed += b->failed_checks;
  double avg = section_avg_busbw(blocks);
  std::string perf = blocks.empty() ? std::string() : blocks.front()->perf_name;
  std::string s;
  s += strprintf("# %-20s : %lld %s\n", "Out of bounds values", static_cast<long long>(failed),
                 failed ? "FAILED" : "OK");
  s += strprintf("# %-20s : %g %s\n", "Avg bus bandwidth", avg,
                 min_busbw > 0 ? (avg < min_busbw ? "FAILED" : "OK") : "");
  s += "#\n";
  s += strprintf("# Collective test concluded: %s\n", perf.c_str());
  s += "#\n";
  return s;
}

std::string format_section_extras(const std::vector<const Block*>& blocks) {
  if (blocks.empty()) return "";
  const Block& f = *blocks.front();
  std::string s = strprintf("# Tier %s: %d rank(s) per communicator, %d communicator(s) at once", f.tier.c_str(),
                            f.nranks, f.groups);
  for (size_t i = 0; i < f.group_hosts.size() && i < 8; ++i) s += (i ? ", " : " (") + f.group_hosts[i];
  s += f.group_hosts.size() > 8 ? ", ...)\n" : (f.group_hosts.empty() ? "\n" : ")\n");
  for (const Block* bp : blocks) {
    const Block& b = *bp;
    if (b.groups > 1 && !b.rows.empty()) {
      for (int g = 0; g < b.groups; ++g) {
        double sum = 0;
        int n = 0;
        for (const auto& r : b.rows) {
          if (g < static_cast<int>(r.nodes_oop.size())) sum += r.nodes_oop[g].busbw + r.nodes_ip[g].busbw, n += 2;
        }
        s += strprintf("# %-20s : %g (%s; %s)\n", strprintf("Node %d avg busbw", g).c_str(), n ? sum / n : 0.0,
                       g < static_cast<int>(b.group_hosts.size()) ? b.group_hosts[g].c_str() : "",
                       fit_name(b).substr(4).c_str());
      }
    }
    if (b.fit.valid) {
      s += strprintf("# %-20s : alpha %.3g us, busbw %.4g GB/s, R2 %.4f, half-peak %llu B, peak %.4g GB/s\n",
                     fit_name(b).c_str(), b.fit.alpha_us, b.fit.busbw_gbps, b.fit.r2,
                     static_cast<unsigned long long>(b.fit.half_peak_bytes), b.fit.peak_busbw_gbps);
    } else {
      s += strprintf("# %-20s : none (%s)\n", fit_name(b).c_str(), b.fit.note.c_str());
    }
  }
  s += "#\n";
  return s;
}

std::string format_trailer(const RunInfo& info, const SweepResult& r) {
  const SweepOptions& o = info.opts;
  std::string s;
  s += strprintf("# Average: %d (%s time per op across ranks)\n", o.average,
                 o.average == 0   ? "rank 0"
                 : o.average == 2 ? "min"
                 : o.average == 3 ? "max"
                                  : "mean");
  s += strprintf("# Topology: %zu ranks on %d node(s), %d per node%s\n", info.ranks.size(), info.nodes,
                 info.ranks_per_node, info.simulated_nodes ? " (simulated nodes)" : "");
  std::string env;
  for (const auto& e : info.env) {
    if (e.rfind("MALLOC_", 0) == 0 || e.rfind("GLIBC_TUNABLES", 0) == 0) env += " " + e;
  }
  s += "# Malloc:" + (env.empty() ? std::string(" (no MALLOC_* settings)") : env) + "\n";
  s += "# Malloc note: " + info.malloc_note + "\n";
  for (const auto& n : o.flag_notes) s += "# Note: " + n + "\n";
  for (const auto& n : r.notes) s += "# Note: " + n + "\n";
  if (!o.json_path.empty() && o.json_path != "-") s += "# Writing JSON output to " + o.json_path + "\n";
  s += "\n";  // nccl-tests ends with an empty line (no error)
  return s;
}

namespace {

ojson measure_nccl_json(const Measure& m, double time_us, bool cputime) {
  return {{cputime ? "cpu_time" : "time", time_us},
          {"alg_bw", m.algbw},
          {"bus_bw", m.busbw},
          {"nwrong", m.checked ? ojson(static_cast<double>(m.wrong)) : ojson(nullptr)}};
}
ojson measure_json(const Measure& m) {
  return {{"time_us", m.time_us},
          {"algbw", m.algbw},
          {"busbw", m.busbw},
          {"wrong", m.checked ? ojson(m.wrong) : ojson(nullptr)}};
}
ojson fit_json(const Block& b) {
  ojson f = {{"collective", b.collective},
             {"tier", b.tier},
             {"type", type_info(b.type).name},
             {"redop", fit_redop(b)},
             {"root", b.root},
             {"ranks", b.nranks},
             {"valid", b.fit.valid},
             {"alpha_us", b.fit.alpha_us},
             {"busbw_gbps", b.fit.busbw_gbps},
             {"r2", b.fit.r2},
             {"half_peak_bytes", b.fit.half_peak_bytes},
             {"peak_busbw_gbps", b.fit.peak_busbw_gbps},
             {"points", b.fit.points},
             {"in_sub_table", b.in_sub_table},
             {"in_fabric", b.in_fabric}};
  if (!b.fit.valid) {  // no model: readers must not mistake zeros for a measured fabric
    f["alpha_us"] = nullptr;
    f["busbw_gbps"] = nullptr;
    f["r2"] = nullptr;
  }
  if (!b.fit.note.empty()) f["note"] = b.fit.note;
  return f;
}
const char* bool_str(bool v) { return v ? "true" : "false"; }  // nccl-tests writes booleans as strings

}  // namespace

namespace {

// The "config" object of nccl-tests' -J document: run settings and one entry per rank's device.
ojson config_json(const RunInfo& info) {
  const SweepOptions& o = info.opts;
  ojson cfg = {{"nthreads", 1}, {"ngpus", 1}, {"minimum_bytes", o.minbytes}, {"maximum_bytes", o.maxbytes}};
  if (o.stepfactor > 1) cfg["step_factor"] = o.stepfactor;
  else cfg["step_bytes"] = o.stepbytes;
  cfg["warmup_iters"] = o.warmup;
  cfg["iterations"] = o.iters;
  cfg["aggregated_iterations"] = o.agg_iters;
  cfg["validation"] = o.check;
  cfg["graph"] = 0;
  cfg["blocking_collectives"] = bool_str(o.blocking != 0);
  cfg["per_iter_timing"] = bool_str(false);
  cfg["per_iter_skip"] = 0;
  cfg["parallel_init"] = bool_str(false);
  ojson devices = ojson::array();
  for (const auto& rk : info.ranks) {
    devices.push_back({{"rank", rk.rank},
                       {"group", rk.group},
                       {"pid", rk.pid},
                       {"hostname", rk.host},
                       {"device", rk.device.device},
                       {"device_hex", rk.device.bus_id},
                       {"device_info", rk.device.name}});
  }
  cfg["devices"] = devices;
  return cfg;
}

// One size of one block as an nccl-tests result entry, cairn's figures under "cairn".
ojson result_json(const SweepOptions& o, const Block& b, const Row& row) {
  const bool cputime = o.report_cputime != 0;
  ojson e = ojson::object();
  e["size"] = row.size;
  e["count"] = row.count;
  e["type"] = type_info(b.type).name;
  e["redop"] = redop_column(b);
  e["root"] = root_column(b.root);
  e["out_of_place"] = measure_nccl_json(row.oop, cputime ? row.oop_cpu_us : row.oop.time_us, cputime);
  e["in_place"] = measure_nccl_json(row.ip, cputime ? row.ip_cpu_us : row.ip.time_us, cputime);
  e["actual_iterations"] = o.iters;
  e["experiment_name"] = o.experiment_name;
  ojson extra = {{"collective", b.collective},
                 {"tier", b.tier},
                 {"ranks", b.nranks},
                 {"oop", measure_json(row.oop)},
                 {"ip", measure_json(row.ip)},
                 {"oop_cpu_time_us", row.oop_cpu_us},
                 {"ip_cpu_time_us", row.ip_cpu_us}};
  if (!row.nodes_oop.empty()) {
    ojson nodes = ojson::array();
    for (size_t g = 0; g < row.nodes_oop.size(); ++g) {
      nodes.push_back({{"node", g},
                       {"host", g < b.group_hosts.size() ? b.group_hosts[g] : ""},
                       {"oop", measure_json(row.nodes_oop[g])},
                       {"ip", measure_json(row.nodes_ip[g])}});
    }
    extra["nodes"] = nodes;
  }
  e["cairn"] = extra;
  return e;
}

ojson block_json(const Block& b) {
  return {{"collective", b.collective},      {"tier", b.tier},           {"type", type_info(b.type).name},
          {"redop", redop_column(b)},        {"root", b.root},           {"ranks", b.nranks},
          {"communicators", b.groups},       {"avg_busbw", b.avg_busbw}, {"wrong", b.wrong},
          {"failed_checks", b.failed_checks}};
}

// The lists sweep_json fills while it walks the blocks, run by run.
struct SweepLists {
  const SweepOptions& o;
  ojson results = ojson::array(), runs = ojson::array(), blocks = ojson::array(), fits = ojson::array();
  double bw_sum = 0;  // over every row's out-of-place and in-place busbw
  size_t bw_n = 0;

  ojson gate(double bw) const { return o.min_busbw > 0 ? ojson(bool_str(bw >= o.min_busbw)) : ojson("unchecked"); }

  // One run = one (tier, collective) table, as one nccl-tests binary writes one results list.
  void add_run(const std::vector<const Block*>& section) {
    ojson run_results = ojson::array();
    int64_t run_failed = 0;  // nccl-tests' "Out of bounds values": failed checks
    for (const Block* bp : section) {
      const Block& b = *bp;
      run_failed += b.failed_checks;
      for (const auto& row : b.rows) {
        ojson e = result_json(o, b, row);
        bw_sum += row.oop.busbw + row.ip.busbw;
        bw_n += 2;
        results.push_back(e);
        run_results.push_back(e);
      }
      blocks.push_back(block_json(b));
      fits.push_back(fit_json(b));
    }
    double run_bw = section_avg_busbw(section);
    runs.push_back({{"collective", section.front()->collective},
                    {"experiment", section.front()->perf_name},
                    {"tier", section.front()->tier},
                    {"ranks", section.front()->nranks},
                    {"results", run_results},
                    {"out_of_bounds", {{"count", run_failed}, {"okay", bool_str(run_failed == 0)}}},
                    {"average_bus_bandwidth", {{"bandwidth", run_bw}, {"okay", gate(run_bw)}}}});
  }
};

// cairn's top-level extras (under "cairn"): provenance, settings beyond nccl-tests', runs, fits, topology.
ojson cairn_extras_json(const RunInfo& info, const SweepResult& r, const SweepLists& lists) {
  const SweepOptions& o = info.opts;
  return {{"provenance", provenance().to_json()},
          {"backend", info.backend},
          {"backend_version", info.backend_version},
          {"average", o.average},
          {"blocking", o.blocking},
          {"mpi_nonblocking", o.mpi_nonblocking},
          {"report_cputime", o.report_cputime},
          {"tiers", o.tiers},
          {"min_busbw", o.min_busbw},
          {"keep_samples", o.keep_samples},
          {"start_time_utc", info.start_time},
          {"end_time_utc", info.end_time},
          {"runs", lists.runs},
          {"fits", lists.fits},
          {"blocks", lists.blocks},
          {"avg_busbw", r.avg_busbw},
          {"wrong", r.wrong},
          {"failed_checks", r.failed_checks},
          {"notes", r.notes},
          {"flag_notes", o.flag_notes},
          {"topology",
           {{"nodes", info.nodes},
            {"ranks_per_node", info.ranks_per_node},
            {"hosts_by_rank", info.hosts_by_rank},
            {"simulated", info.simulated_nodes}}},
          {"malloc", {{"tuned_in_process", o.malloc_tune}, {"note", info.malloc_note}}}};
}

}  // namespace

ojson sweep_json(const RunInfo& info, const SweepResult& r) {
  const SweepOptions& o = info.opts;
  // nccl-tests' -J document (JSON_FILE_VERSION 3), key for key and in its order; cairn's extras
  // sit under "cairn" (top level and per result).
  ojson doc = ojson::object();
  doc["version"] = 3;
  doc["start_time"] = info.start_time_local;
  doc["args"] = o.args;
  doc["env"] = info.env;  // filtered (nccl-tests records the whole environment, which can hold secrets)
  doc["nccl_version"] = info.nccl_version;
  doc["config"] = config_json(info);

  SweepLists lists{o};
  for (size_t i = 0; i < r.blocks.size();) {
    // Consecutive blocks of the same tier and collective form one run.
    std::vector<const Block*> section;
    size_t j = i;
    for (; j < r.blocks.size() && r.blocks[j].tier == r.blocks[i].tier &&
           r.blocks[j].collective == r.blocks[i].collective;
         ++j) {
      section.push_back(&r.blocks[j]);
    }
    lists.add_run(section);
    i = j;
  }
  double avg_rows = lists.bw_n ? lists.bw_sum / static_cast<double>(lists.bw_n) : 0.0;
  doc["results"] = lists.results;
  doc["out_of_bounds"] = {{"count", r.failed_checks}, {"okay", bool_str(r.failed_checks == 0)}};
  doc["average_bus_bandwidth"] = {{"bandwidth", lists.runs.size() == 1
                                                    ? lists.runs[0]["average_bus_bandwidth"]["bandwidth"]
                                                    : ojson(avg_rows)},
                                  {"okay", o.min_busbw > 0 ? ojson(bool_str(!r.gate_failed)) : ojson("unchecked")}};
  doc["errors"] = ojson::array();
  doc["end_time"] = info.end_time_local;
  doc["cairn"] = cairn_extras_json(info, r, lists);
  return doc;
}

void write_sweep_h5(const std::string& path, const RunInfo& info, const SweepResult& r) {
  const SweepOptions& o = info.opts;
  AtomicFile af(path);
  {
    h5::File f = h5::File::create(af.temp_path());
    h5::write_provenance(f);
    f.set_attr("backend", info.backend);
    f.set_attr("backend_version", info.backend_version);
    f.set_attr("start_time", info.start_time);
    f.set_attr("end_time", info.end_time);
    f.set_attr("avg_busbw", r.avg_busbw);
    f.set_attr("wrong", static_cast<int64_t>(r.wrong));
    f.set_attr("failed_checks", static_cast<int64_t>(r.failed_checks));
    f.set_attr("malloc_note", info.malloc_note);
    f.set_attr("malloc_tuned_in_process", static_cast<int64_t>(o.malloc_tune));
    f.set_attr("mpi_nonblocking", static_cast<int64_t>(o.mpi_nonblocking));
    f.write_strings("environment", info.env.empty() ? std::vector<std::string>{""} : info.env);

    h5::Group topo = f.create_group("topology");
    topo.write_strings("hosts_by_rank", info.hosts_by_rank);
    std::vector<std::string> devices;
    for (const auto& rk : info.ranks) {
      devices.push_back(strprintf("%d [%s] %s", rk.device.device, rk.device.bus_id.c_str(), rk.device.name.c_str()));
    }
    topo.write_strings("device_by_rank", devices);
    std::vector<int32_t> node_of_rank;
    for (const auto& rk : info.ranks) node_of_rank.push_back(rk.group);
    topo.write<int32_t>("node_of_rank", node_of_rank);
    std::vector<int32_t> per_node(info.nodes, 0);
    for (int n : node_of_rank) per_node[n]++;
    topo.write<int32_t>("ranks_per_node", per_node);
    topo.set_attr("nodes", info.nodes);
    topo.set_attr("world_size", static_cast<int64_t>(info.ranks.size()));
    topo.set_attr("simulated", static_cast<int64_t>(info.simulated_nodes));

    h5::Group conf = f.create_group("options");
    conf.set_attr("minbytes", static_cast<uint64_t>(o.minbytes));
    conf.set_attr("maxbytes", static_cast<uint64_t>(o.maxbytes));
    conf.set_attr("stepfactor", o.stepfactor);
    conf.set_attr("stepbytes", static_cast<uint64_t>(o.stepbytes));
    conf.set_attr("iters", o.iters);
    conf.set_attr("warmup_iters", o.warmup);
    conf.set_attr("check", o.check);
    conf.set_attr("average", o.average);
    conf.set_attr("blocking", o.blocking);

    h5::Group blocks = f.create_group("blocks");
    for (size_t i = 0; i < r.blocks.size(); ++i) {
      const Block& b = r.blocks[i];
      h5::Group g = blocks.create_group(strprintf("%03zu_%s_%s_%s_%s", i, b.tier.c_str(), b.collective.c_str(),
                                                  type_info(b.type).name, op_name(b.op)));
      g.set_attr("collective", b.collective);
      g.set_attr("tier", b.tier);
      g.set_attr("type", std::string(type_info(b.type).name));
      g.set_attr("redop", std::string(op_name(b.op)));
      g.set_attr("root", b.root);
      g.set_attr("ranks", b.nranks);
      g.set_attr("communicators", b.groups);
      g.set_attr("avg_busbw", b.avg_busbw);
      g.set_attr("wrong", static_cast<int64_t>(b.wrong));
      g.set_attr("failed_checks", static_cast<int64_t>(b.failed_checks));
      std::vector<uint64_t> size, count;
      std::vector<double> ot, oa, ob, it, ia, ib;
      std::vector<int64_t> ow, iw;
      for (const auto& row : b.rows) {
        size.push_back(row.size);
        count.push_back(row.count);
        ot.push_back(row.oop.time_us), oa.push_back(row.oop.algbw), ob.push_back(row.oop.busbw);
        it.push_back(row.ip.time_us), ia.push_back(row.ip.algbw), ib.push_back(row.ip.busbw);
        ow.push_back(row.oop.checked ? row.oop.wrong : -1);
        iw.push_back(row.ip.checked ? row.ip.wrong : -1);
      }
      g.write<uint64_t>("size", size);
      g.write<uint64_t>("count", count);
      g.write<double>("oop_time_us", ot);
      g.write<double>("oop_algbw", oa);
      g.write<double>("oop_busbw", ob);
      g.write<int64_t>("oop_wrong", ow);
      g.write<double>("ip_time_us", it);
      g.write<double>("ip_algbw", ia);
      g.write<double>("ip_busbw", ib);
      g.write<int64_t>("ip_wrong", iw);
      if (b.groups > 1 && !b.rows.empty()) {
        std::vector<double> nt, nb;
        for (const auto& row : b.rows) {
          for (const auto& m : row.nodes_oop) nt.push_back(m.time_us), nb.push_back(m.busbw);
        }
        std::vector<hsize_t> dims = {b.rows.size(), static_cast<hsize_t>(b.groups)};
        g.write<double>("nodes_oop_time_us", nt, dims);
        g.write<double>("nodes_oop_busbw", nb, dims);
      }
      if (o.keep_samples && !b.rows.empty()) {
        std::vector<double> so, si;
        for (const auto& row : b.rows) {
          so.insert(so.end(), row.samples_oop.begin(), row.samples_oop.end());
          si.insert(si.end(), row.samples_ip.begin(), row.samples_ip.end());
        }
        std::vector<hsize_t> dims = {b.rows.size(), static_cast<hsize_t>(o.iters)};
        g.write<double>("samples_oop_us", so, dims);
        g.write<double>("samples_ip_us", si, dims);
      }
      h5::Group fit = g.create_group("fit");
      fit.set_attr("valid", static_cast<int64_t>(b.fit.valid));
      fit.set_attr("alpha_us", b.fit.alpha_us);
      fit.set_attr("busbw_gbps", b.fit.busbw_gbps);
      fit.set_attr("r2", b.fit.r2);
      fit.set_attr("half_peak_bytes", static_cast<uint64_t>(b.fit.half_peak_bytes));
      fit.set_attr("peak_busbw_gbps", b.fit.peak_busbw_gbps);
      fit.set_attr("in_sub_table", static_cast<int64_t>(b.in_sub_table));
      fit.set_attr("in_fabric", static_cast<int64_t>(b.in_fabric));
      if (!b.fit.note.empty()) fit.set_attr("note", b.fit.note);
    }
    f.close();
  }
  af.commit();
}

std::string fabric_key(const Block& b) {
  const std::string redop = fit_redop(b);
  return b.tier + "." + b.collective + "." + type_info(b.type).name + (redop == "none" ? std::string() : "." + redop);
}

std::vector<std::string> mark_fabric_blocks(std::vector<Block>& blocks, DataType first_type, RedOp first_op) {
  for (auto& b : blocks) b.in_sub_table = b.in_fabric = false;
  // Each sub-table: the first valid fit of its measurements. Both used to be written from different measurements:
  // the first one's failure listed as skipped, and a later valid fit as [<tier>.<collective>] with no sub-table.
  std::vector<std::string> notes;
  std::set<std::string> keys_seen;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::string key = fabric_key(blocks[i]);
    if (!keys_seen.insert(key).second) continue;
    std::vector<Block*> same;
    for (size_t j = i; j < blocks.size(); ++j)
      if (fabric_key(blocks[j]) == key) same.push_back(&blocks[j]);
    const auto valid = std::find_if(same.begin(), same.end(), [](const Block* b) { return b->fit.valid; });
    if (valid != same.end()) (*valid)->in_sub_table = true;
    if (same.size() < 2) continue;
    std::string which;
    for (size_t k = 0; k < same.size(); ++k) which += (k ? ", " : "") + fit_name(*same[k]).substr(4);
    notes.push_back(valid == same.end()
                        ? strprintf("fabric.toml [%s]: measured %zu times (%s), none with a valid fit (see its skipped "
                                    "list)",
                                    key.c_str(), same.size(), which.c_str())
                        : strprintf("fabric.toml [%s]: measured %zu times (%s); it holds measurement %td, the first "
                                    "with a valid fit",
                                    key.c_str(), same.size(), which.c_str(), valid - same.begin() + 1));
  }
  // Each (tier, collective): of its sub-tables' fits, the first requested type and op, else the first.
  auto preferred = [&](const Block& b) { return b.type == first_type && (b.op == RedOp::None || b.op == first_op); };
  std::set<std::string> collectives_seen;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (!collectives_seen.insert(blocks[i].tier + "." + blocks[i].collective).second) continue;
    Block* chosen = nullptr;
    for (size_t j = i; j < blocks.size(); ++j) {
      Block& b = blocks[j];
      if (b.tier != blocks[i].tier || b.collective != blocks[i].collective || !b.in_sub_table) continue;
      if (preferred(b)) {
        chosen = &b;
        break;
      }
      if (!chosen) chosen = &b;
    }
    if (chosen) chosen->in_fabric = true;
  }
  return notes;
}

std::string fabric_toml(const RunInfo& info, const SweepResult& r) {
  const Provenance& p = provenance();
  records::FabricHeader header;
  header.backend = info.backend;
  header.backend_version = info.backend_version;
  header.world_size = static_cast<int64_t>(info.ranks.size());
  header.nodes = info.nodes;
  header.ranks_per_node = info.ranks_per_node;
  header.simulated_nodes = info.simulated_nodes;
  header.type = type_info(info.opts.types.front()).name;
  header.tool = p.tool;
  header.version = p.version;
  header.git_sha = p.git_sha;
  header.host = p.host;
  header.time_utc = p.time_utc;
  header.command_line = p.command_line;
  header.sweep = info.sweep_config;
  json doc = json::object();
  std::vector<std::string> skipped;
  auto fit_table = [](const Block& b) {
    records::FabricTier t;
    t.alpha_us = b.fit.alpha_us;
    t.busbw_gbps = b.fit.busbw_gbps;
    t.ranks = b.nranks;
    t.r2 = b.fit.r2;
    t.half_peak_bytes = b.fit.half_peak_bytes;
    t.peak_busbw_gbps = b.fit.peak_busbw_gbps;
    return t;
  };
  // [<tier>.<collective>] is the model cairn-plan reads (one type/op, see mark_fabric_blocks); every
  // measured type and op also gets its own sub-table, [<tier>.<collective>.<type>.<redop>], or
  // [<tier>.<collective>.<type>] for collectives without a reduction (type and redop named as in
  // the table's columns). A sub-table measured more than once holds one fit, the block marked in_sub_table.
  for (const auto& b : r.blocks) {
    if (!b.in_fabric && !b.in_sub_table) continue;
    json& coll = doc[b.tier][b.collective];
    if (b.in_fabric) {
      records::FabricTier t = fit_table(b);
      t.type = type_info(b.type).name;
      t.redop = fit_redop(b);
      const json fit = t.to_json();
      for (auto it = fit.begin(); it != fit.end(); ++it) coll[it.key()] = it.value();
    }
    if (!b.in_sub_table) continue;
    if (fit_redop(b) == std::string("none")) coll[type_info(b.type).name] = fit_table(b).to_json();
    else coll[type_info(b.type).name][fit_redop(b)] = fit_table(b).to_json();
  }
  // Sub-tables without a valid fit in any measurement: why, from the first.
  std::set<std::string> keys_with_table, keys_listed;
  for (const auto& b : r.blocks)
    if (b.in_sub_table) keys_with_table.insert(fabric_key(b));
  for (const auto& b : r.blocks) {
    const std::string key = fabric_key(b);
    if (!keys_with_table.count(key) && keys_listed.insert(key).second) skipped.push_back(key + ": " + b.fit.note);
  }
  header.notes = r.fabric_notes;
  header.skipped = skipped;
  doc["fabric"] = header.to_json();
  return "# Fabric model measured by cairn-sweep; cairn-plan reads it via [cluster] fabric = \"<this file>\".\n"
         "# time(S bytes on n ranks) = alpha_us + S * busbw_factor(collective, n) / busbw_gbps (nccl-tests factors)\n" +
         json_to_toml(doc) + "\n";
}

}  // namespace cairn::sweep
