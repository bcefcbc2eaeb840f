// cairn-sweep: collective-bandwidth sweeps (MPI or NCCL) with nccl-tests-compatible output,
// per-tier latency/bandwidth fits and fabric.toml for cairn-plan.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>

#include "cairn/cli.h"
#include "cairn/error.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "sweep.h"

int main(int argc, char** argv) {
  return cairn::run_tool("cairn-sweep", argc, argv, [&]() -> int {
    CLI::App app{"cairn-sweep: measure collective bandwidth per size and per cluster tier (nccl-tests-compatible "
                 "table on stdout; sweep.txt, sweep.json, sweep.h5 and fabric.toml under <out>/sweep/)"};
    cairn::CommonOptions opts;
    cairn::add_common_options(app, opts);
    std::string minbytes, maxbytes, stepbytes, backend;
    int64_t stepfactor = 0, iters = 0, warmup = 0, check = 0, average = 0, blocking = 0, root = 0;
    double min_busbw = 0;
    std::vector<std::string> colls, types, ops, tiers;
    bool keep_samples = false, malloc_tune = false;
    app.add_option("collectives,--collectives", colls,
                   "allreduce, allgather, reducescatter, alltoall, broadcast, reduce, sendrecv or all (comma list)")
        ->delimiter(',');
    app.add_option("-b,--minbytes", minbytes, "smallest size in bytes, K/M/G suffixes (default 8)");
    app.add_option("-e,--maxbytes", maxbytes, "largest size in bytes, K/M/G suffixes (default 128M)");
    app.add_option("-f,--stepfactor", stepfactor, "multiply the size by this each step (default 2)");
    app.add_option("-i,--stepbytes", stepbytes, "add this many bytes each step (implies -f 1 unless -f is given)");
    app.add_option("-n,--iters", iters, "timed iterations per size (default 20)");
    app.add_option("-w,--warmup_iters", warmup, "warm-up iterations (default 5)");
    app.add_option("-c,--check", check, "correctness-check iterations per size; 0 = off (default 1)");
    app.add_option("-a,--average", average, "time across ranks: 0 rank 0, 1 mean, 2 min, 3 max (default 1)");
    app.add_option("-z,--blocking", blocking, "1 = wait and barrier after each collective (default 0)");
    app.add_option("-d,--datatype", types, "float32, float64, int32, float16, bfloat16 (comma list)")->delimiter(',');
    app.add_option("--op", ops, "sum, max, min, avg (comma list)")->delimiter(',');
    app.add_option("-r,--root", root, "root of broadcast/reduce (default 0)");
    app.add_option("--backend", backend, "auto, mpi or nccl (default auto)");
    app.add_option("--tiers", tiers, "world, intra, inter (comma list; default world)")->delimiter(',');
    app.add_option("--min-busbw", min_busbw, "exit 3 if a block's average bus bandwidth (GB/s) is lower");
    app.add_flag("--keep-samples", keep_samples, "store every iteration's time in sweep.h5");
    app.add_flag("--malloc-tune", malloc_tune, "mallopt(M_MMAP_MAX=0, M_TRIM_THRESHOLD=1GiB) before measuring");
    cairn::sweep::BenchBareOptions bench;
    bench.max_rounds = 0;
    double bench_loop_ms = 0.5;
    app.add_option("--bench-bare", bench.max_rounds,
                   "benchmark mode: per size, up to N alternating rounds of cairn-sweep's allreduce measurement and "
                   "a bare MPI_Allreduce loop on the same buffers; prints both busbw (see README)");
    app.add_option("--bench-loop-ms", bench_loop_ms, "with --bench-bare: length of one timed loop (default 0.5 ms)");
    app.add_option("--bench-size-s", bench.size_seconds,
                   "with --bench-bare: time budget per size (default 5 s; at least 24 rounds)");
    cairn::parse_cli(app, argc, argv);

    // Flags given on the command line become typed [sweep] settings (ranked like --set).
    cairn::ToolSettings settings;
    auto set = [&](const char* key, cairn::json value) { settings.emplace_back(std::string("sweep.") + key, std::move(value)); };
    if (app.count("collectives")) set("collectives", colls);
    if (app.count("-b")) set("minbytes", minbytes);
    if (app.count("-e")) set("maxbytes", maxbytes);
    if (app.count("-i")) {
      set("stepbytes", stepbytes);
      if (!app.count("-f")) set("stepfactor", 1);
    }
    if (app.count("-f")) set("stepfactor", stepfactor);
    if (app.count("-n")) set("iters", iters);
    if (app.count("-w")) set("warmup_iters", warmup);
    if (app.count("-c")) set("check", check);
    if (app.count("-a")) set("average", average);
    if (app.count("-z")) set("blocking", blocking);
    if (app.count("-d")) set("types", types);
    if (app.count("--op")) set("ops", ops);
    if (app.count("-r")) set("root", root);
    if (app.count("--backend")) set("backend", backend);
    if (app.count("--tiers")) set("tiers", tiers);
    if (app.count("--min-busbw")) set("min_busbw", min_busbw);
    if (keep_samples) set("keep_samples", true);
    if (malloc_tune) set("malloc_tune", true);

    // No helper threads here: MPI_THREAD_SINGLE, as a bare benchmark loop would initialise MPI.
    cairn::mpi::Session session(&argc, &argv, MPI_THREAD_SINGLE);
    cairn::Config cfg = cairn::load_tool_config(opts, settings);
    if (cairn::maybe_print_config(opts, cfg)) return 0;
    cairn::sweep::SweepOptions so = cairn::sweep::sweep_options(cfg);
    so.json_path = opts.json_path;
    so.print_table = opts.json_path != "-";  // --json - owns stdout
    if (bench.max_rounds > 0) {
      bench.loop_seconds = bench_loop_ms / 1000.0;
      return cairn::sweep::run_bench_bare(so, bench);
    }
    cairn::sweep::SweepResult result;
    int code = cairn::sweep::run_sweep(cfg, so, &result);
    if (code != 0 && cairn::mpi::rank() == 0) std::fprintf(stderr, "cairn-sweep: %s\n", result.verdict.c_str());
    return code;
  });
}
