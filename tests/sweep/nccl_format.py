#!/usr/bin/env python3
"""nccl-tests' output rules, written from its source (src/util.cu, src/common.cu, nccl-tests 2.19.6)
as a spec and applied to one cairn-sweep run: the stdout text line by line and the -J JSON document.

  nccl_format.py TABLE JSON [--types float,int32] [--ops sum,max] [--ranks N] [--roots all|R]
                 [--cputime] [--experiment NAME]

Text: line 1 is "# nccl-tests version ...". Each (tier, collective) section is what one nccl-tests
binary prints: "# Collective test starting", the options line (with unalign), "#", "# Using
devices" and the rank lines, "#", the three header lines, every type/op/root row of the table, then
the footer ("Out of bounds values", "Avg bus bandwidth", "#", "Collective test concluded"). Rows are
re-rendered here with nccl-tests' printf formats and getFloatStr from the JSON numbers and must
match byte for byte. Nothing but '#' lines may stand outside tables; the output ends with an empty
line. JSON: nccl-tests' keys in the order its writer emits them (cairn's extras under "cairn", last). With --types/--ops every table must hold rows for every type x op (x root) asked for, in
nccl-tests' loop order (type, op, root); non-reducing collectives print op "none", sendrecv the op.
"""
import argparse
import json
import re
import sys

PERF = {"allreduce": "all_reduce_perf", "allgather": "all_gather_perf", "reducescatter": "reduce_scatter_perf",
        "alltoall": "alltoall_perf", "broadcast": "broadcast_perf", "reduce": "reduce_perf",
        "sendrecv": "sendrecv_perf"}
OP_COLUMN = {"allreduce", "reducescatter", "reduce", "sendrecv"}
ROOTED = {"broadcast", "reduce"}
# nccl-tests' type and op order (test_typenames, test_opnames)
TYPE_ORDER = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16"]
OP_ORDER = ["sum", "prod", "max", "min", "avg"]
DATE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")


def fail(msg):
    print("nccl_format: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def get_float_str(value, width):
    """getFloatStr: %.2f, %.1f, %.0f, whichever first fits in `width`; else %.1e (%.0e below 7)."""
    for fmt in ("%*.2f", "%*.1f", "%*.0f"):
        text = fmt % (width, value)
        if len(text) <= width:
            return text
    return ((width >= 7 and "%*.1e" or "%*.0e") % (width, value))[:width]


def header_lines(cputime):
    t = "cputime" if cputime else "time"
    return [
        "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          " % ("", "", "", "", ""),
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s" % (
            "size", "count", "type", "redop", "root", t, "algbw", "busbw", "#wrong", t, "algbw", "busbw", "#wrong", 0, ""),
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s" % (
            "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", 0, ""),
    ]


def row_line(r, cputime):
    key = "cpu_time" if cputime else "time"
    s = "%12d  %12d  %8s  %6s  %6s" % (r["size"], r["count"], r["type"], r["redop"], r["root"])
    for side in ("out_of_place", "in_place"):
        m = r[side]
        body = "  %7s  %6s  %6s" % (get_float_str(m[key], 7), get_float_str(m["alg_bw"], 6), get_float_str(m["bus_bw"], 6))
        s += body + ("    N/A" if m["nwrong"] is None else "  %6g" % m["nwrong"])
    return s


def check_json(doc, a):
    if doc.get("version") != 3:
        fail("JSON version %r, nccl-tests writes 3" % doc.get("version"))
    # Keys in nccl-tests' order (its writer emits them one by one), cairn's extras last; json.load keeps file order.
    top = ["version", "start_time", "args", "env", "nccl_version", "config", "results", "out_of_bounds",
           "average_bus_bandwidth", "errors", "end_time", "cairn"]
    if list(doc) != top:
        fail("JSON keys %s, want nccl-tests' %s in that order" % (list(doc), top))
    for k in ("start_time", "end_time"):
        if not DATE.match(doc[k]):
            fail("%s %r is not nccl-tests' %%Y-%%m-%%d %%H:%%M:%%S" % (k, doc[k]))
    if not isinstance(doc["args"], list) or not all(isinstance(x, str) for x in doc["args"]) or len(doc["args"]) < 2:
        fail("args must be the command line as a list of strings: %r" % doc["args"])
    if not isinstance(doc["nccl_version"], int):
        fail("nccl_version must be an integer")
    cfg = doc["config"]
    step = [k for k in ("step_factor", "step_bytes") if k in cfg]
    want = ["nthreads", "ngpus", "minimum_bytes", "maximum_bytes"] + step[:1] + [
        "warmup_iters", "iterations", "aggregated_iterations", "validation", "graph", "blocking_collectives",
        "per_iter_timing", "per_iter_skip", "parallel_init", "devices"]
    if len(step) != 1 or list(cfg) != want:
        fail("config keys %s differ from nccl-tests' %s" % (list(cfg), want))
    for k in ("blocking_collectives", "per_iter_timing", "parallel_init"):
        if cfg[k] not in ("true", "false"):
            fail("config.%s = %r: nccl-tests writes booleans as \"true\"/\"false\" strings" % (k, cfg[k]))
    for d in cfg["devices"]:
        if list(d) != ["rank", "group", "pid", "hostname", "device", "device_hex", "device_info"]:
            fail("device entry %r" % d)
    side_keys = ["cpu_time" if a.cputime else "time", "alg_bw", "bus_bw", "nwrong"]
    for r in doc["results"]:
        if list(r) != ["size", "count", "type", "redop", "root", "out_of_place", "in_place", "actual_iterations",
                       "experiment_name", "cairn"]:
            fail("result keys %s" % list(r))
        # cairn's own per-row figures: the table's columns, left to right
        if list(r["cairn"])[:5] != ["collective", "tier", "ranks", "oop", "ip"] or \
                list(r["cairn"]["oop"]) != ["time_us", "algbw", "busbw", "wrong"]:
            fail("result cairn keys %s" % list(r["cairn"]))
        if not re.match(r"^ *-?\d+$", r["root"]) or len(r["root"]) < 6:
            fail("root %r is not nccl-tests' %%6i string" % r["root"])
        if r["experiment_name"] != a.experiment:
            fail("experiment_name %r, want %r" % (r["experiment_name"], a.experiment))
        for side in ("out_of_place", "in_place"):
            if list(r[side]) != side_keys:
                fail("%s keys %s, want %s" % (side, list(r[side]), side_keys))
    if list(doc["out_of_bounds"]) != ["count", "okay"] or doc["out_of_bounds"]["okay"] not in ("true", "false"):
        fail("out_of_bounds %r" % doc["out_of_bounds"])
    abw = doc["average_bus_bandwidth"]
    if list(abw) != ["bandwidth", "okay"] or abw["okay"] not in ("true", "false", "unchecked"):
        fail("average_bus_bandwidth %r" % abw)
    runs = doc["cairn"]["runs"]
    if sum(len(run["results"]) for run in runs) != len(doc["results"]):
        fail("cairn.runs do not partition results")
    for run in runs:
        if set(run) < {"collective", "tier", "results", "out_of_bounds", "average_bus_bandwidth"}:
            fail("cairn.runs entry %r" % sorted(run))


def expected_keys(coll, types, ops, ranks, roots):
    keys = []
    for t in types:
        for op in (ops if coll in OP_COLUMN else ["none"]):
            rs = [-1]
            if coll in ROOTED:
                rs = list(range(ranks)) if roots == "all" else [int(roots)]
            for root in rs:
                keys.append((t, op, root))
    return keys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("table")
    ap.add_argument("json")
    ap.add_argument("--types")
    ap.add_argument("--ops")
    ap.add_argument("--ranks", type=int)
    ap.add_argument("--roots", default="0")
    ap.add_argument("--cputime", action="store_true")
    ap.add_argument("--experiment", default="")
    a = ap.parse_args()

    doc = json.load(open(a.json))
    check_json(doc, a)
    results = doc["results"]
    lines = open(a.table).read().split("\n")
    if lines[-1] != "" or lines[-2] != "":
        fail("output must end with an empty line, as nccl-tests' writeErrors prints")
    lines = lines[:-1]
    if not re.match(r"^# nccl-tests version \S+ nccl-headers=\d+ nccl-library=\d+$", lines[0]):
        fail("line 1 is not nccl-tests' version line: %r" % lines[0])

    i, ri, sections = 1, 0, []
    options = re.compile(r"^# nThread 1 nGpus 1 minBytes \d+ maxBytes \d+ step: \d+\((factor|bytes)\) warmup iters: "
                         r"\d+ iters: \d+ agg iters: \d+ validation: \d+ graph: \d+ unalign: \d+$")
    rank_re = re.compile(r"^#  Rank +(-?\d+) Group +(-?\d+) Pid +(\d+) on +(\S+) device +(-?\d+) \[([^\]]*)\] (.*)$")
    while i < len(lines):
        line = lines[i]
        if not line.startswith("# Collective test starting: "):
            if line and not line.startswith("#"):
                fail("line %d outside a table is not a comment: %r" % (i + 1, line))
            i += 1
            continue
        perf = line[len("# Collective test starting: "):]
        i += 1
        if not options.match(lines[i]):
            fail("line %d after 'Collective test starting' is not the options line: %r" % (i + 1, lines[i]))
        i += 1
        while lines[i].startswith("# Blocking Enabled") or lines[i].startswith("# Per-Iteration") or \
                lines[i].startswith("# Parallel Init"):
            i += 1
        if lines[i:i + 2] != ["#", "# Using devices"]:
            fail("line %d: want '#' then '# Using devices', got %r" % (i + 1, lines[i:i + 2]))
        i += 2
        ndev = 0
        while rank_re.match(lines[i]):
            m = rank_re.match(lines[i])
            again = "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s" % (
                int(m[1]), int(m[2]), int(m[3]), m[4], int(m[5]), m[6], m[7])
            if again != lines[i]:
                fail("rank line %d %r != nccl-tests' format %r" % (i + 1, lines[i], again))
            ndev += 1
            i += 1
        if ndev != len(doc["config"]["devices"]):
            fail("%d rank lines, %d devices in JSON" % (ndev, len(doc["config"]["devices"])))
        if lines[i] != "#" or lines[i + 1:i + 4] != header_lines(a.cputime):
            fail("line %d: table header differs from nccl-tests':\n%s" % (i + 1, "\n".join(lines[i:i + 4])))
        i += 4
        table = []
        while not lines[i].startswith("#"):
            if ri >= len(results):
                fail("more table rows than JSON results")
            want = row_line(results[ri], a.cputime)
            if lines[i] != want:
                fail("row %d differs from nccl-tests' rendering of the JSON numbers:\n  got  %r\n  want %r" %
                     (i + 1, lines[i], want))
            table.append(results[ri])
            ri += 1
            i += 1
        if not table:
            fail("section %s has no rows" % perf)
        coll = table[0]["cairn"]["collective"]
        if PERF[coll] != perf or any(r["cairn"]["collective"] != coll for r in table):
            fail("section %s holds rows of %s" % (perf, sorted({r["cairn"]["collective"] for r in table})))
        if len({r["cairn"]["tier"] for r in table}) != 1:
            fail("section %s mixes tiers" % perf)
        wrong = sum(int(r[s]["nwrong"] or 0) for r in table for s in ("out_of_place", "in_place"))
        bw = sum(r["out_of_place"]["bus_bw"] + r["in_place"]["bus_bw"] for r in table) / (2 * len(table))
        m = re.match(r"^# Out of bounds values : (\d+) (OK|FAILED)$", lines[i])
        if not m or int(m[1]) != wrong or (m[2] == "OK") != (wrong == 0):
            fail("line %d: footer %r, want %d wrong" % (i + 1, lines[i], wrong))
        m = re.match(r"^# Avg bus bandwidth    : (\S+) (|OK|FAILED)$", lines[i + 1])
        if not m or abs(float(m[1]) - bw) > 1e-5 * (1 + bw) or m[1] != "%g" % float(m[1]):
            fail("line %d: %r, want %%g of %g" % (i + 2, lines[i + 1], bw))
        if lines[i + 2] != "#" or lines[i + 3] != "# Collective test concluded: " + perf:
            fail("line %d: footer ends %r" % (i + 3, lines[i + 2:i + 4]))
        i += 4
        if a.types:
            keys = [(r["type"], r["redop"], int(r["root"])) for r in table]
            order = []
            for k in keys:
                if not order or order[-1] != k:
                    order.append(k)
            types = sorted(a.types.split(","), key=TYPE_ORDER.index)
            ops = sorted(a.ops.split(","), key=OP_ORDER.index)
            want = expected_keys(coll, types, ops, a.ranks, a.roots)
            if order != want:
                fail("%s rows cover %s, nccl-tests' loops give %s" % (perf, order, want))
        sections.append(perf)
    if ri != len(results):
        fail("%d JSON results, %d table rows" % (len(results), ri))
    print("nccl_format: ok: %d sections (%s), %d rows" % (len(sections), ", ".join(sections), ri))


if __name__ == "__main__":
    main()
