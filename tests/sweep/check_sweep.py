#!/usr/bin/env python3
"""Checks one cairn-sweep run the way its users would: parse the stdout table like an nccl-tests
script (split on whitespace, skip '#'), recompute sizes/counts and bus bandwidths independently,
and require sweep.json, --json, sweep.h5, sweep.txt and fabric.toml to agree with the table."""
import argparse
import json
import sys
import tomllib

import h5py

FACTORS = {
    "allreduce": lambda n: 2.0 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}
SPLIT = {"allgather", "reducescatter", "alltoall"}
WORD = {"float": 4, "int32": 4, "double": 8, "half": 2, "bfloat16": 2}


def fail(msg):
    print("check_sweep: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def float_column(value, width):
    """nccl-tests' getFloatStr (src/util.cu): the first of %.2f, %.1f, %.0f that fits the width,
    else an exponent (%.1e from 7 characters, %.0e below), cut at the width."""
    for fmt in ("%*.2f", "%*.1f", "%*.0f"):
        text = fmt % (width, value)
        if len(text) <= width:
            return text
    return ((width >= 7 and "%*.1e" or "%*.0e") % (width, value))[:width]


def parse_table(path):
    """What nccl-tests users do: every non-comment line is a row of whitespace-separated fields."""
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            fields = line.split()
            if len(fields) != 13:
                fail("row with %d fields: %r" % (len(fields), line))
            rows.append(fields)
    return rows


def expected_row(coll, req_bytes, word, n):
    count = req_bytes // word
    if coll in SPLIT:
        per = (count // n) & ~(16 // word - 1)  # nccl-tests trims per-rank blocks to 16-byte multiples
        return per * n * word, per
    return count * word, count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("table")
    ap.add_argument("outdir")
    ap.add_argument("--json")
    ap.add_argument("--minbytes", type=int, required=True)
    ap.add_argument("--maxbytes", type=int, required=True)
    ap.add_argument("--expect-wrong", type=int, default=0)
    ap.add_argument("--expect-failed-checks", type=int, help="nccl-tests' Out of bounds values (default: as wrong)")
    a = ap.parse_args()

    rows = parse_table(a.table)
    doc = json.load(open(a.outdir + "/sweep.json"))
    if a.json:
        other = json.load(open(a.json))
        if other["results"] != doc["results"]:
            fail("--json results differ from sweep.json")
    txt = open(a.outdir + "/sweep.txt").read()
    if txt != open(a.table).read():
        fail("sweep.txt differs from stdout")
    results = doc["results"]
    for r in results:  # cairn's per-row extras live under "cairn"
        r.update({k: v for k, v in r["cairn"].items()})
    if len(rows) != len(results):
        fail("%d table rows but %d JSON results" % (len(rows), len(results)))
    requested = []
    s = a.minbytes
    while s <= a.maxbytes:
        requested.append(s)
        s *= 2

    wrong_total = 0
    failed_cells = 0  # (row, placement) pairs whose check found wrong elements
    for fields, r in zip(rows, results):
        coll, n = r["collective"], r["ranks"]
        word = WORD[r["type"]]
        # size/count: one of the requested sizes, reduced exactly as nccl-tests does.
        options = {expected_row(coll, b, word, n) for b in requested}
        if (r["size"], r["count"]) not in options:
            fail("%s n=%d: size %d count %d not an nccl-tests row" % (coll, n, r["size"], r["count"]))
        if [int(fields[0]), int(fields[1])] != [r["size"], r["count"]]:
            fail("table size/count differ from JSON: %r" % fields)
        if fields[2] != r["type"] or fields[3] != r["redop"] or fields[4] != r["root"].strip():
            fail("table type/redop/root differ from JSON: %r vs %r" % (fields, r))
        for key, col in (("out_of_place", 5), ("in_place", 9)):
            m = r[key]
            factor = FACTORS[coll](n)
            algbw = r["size"] / 1e3 / m["time"]
            if abs(m["alg_bw"] - algbw) > 1e-9 * (1 + algbw):
                fail("%s algbw %g != size/time %g" % (coll, m["alg_bw"], algbw))
            if abs(m["bus_bw"] - m["alg_bw"] * factor) > 1e-9 * (1 + m["bus_bw"]):
                fail("%s n=%d busbw %g != algbw %g x %g" % (coll, n, m["bus_bw"], m["alg_bw"], factor))
            printed = [float_column(m["time"], 7).strip(), float_column(m["alg_bw"], 6).strip(),
                       float_column(m["bus_bw"], 6).strip()]
            if fields[col:col + 3] != printed:
                fail("table %r != JSON formatted %r" % (fields[col:col + 3], printed))
            want_wrong = "N/A" if m["nwrong"] is None else "%g" % m["nwrong"]
            if fields[col + 3] != want_wrong:
                fail("table #wrong %s != JSON %s" % (fields[col + 3], want_wrong))
            if m["nwrong"] is not None:
                wrong_total += int(m["nwrong"])
                failed_cells += m["nwrong"] > 0
            cm = r["oop" if key == "out_of_place" else "ip"]
            if cm["busbw"] != m["bus_bw"] or cm["time_us"] != m["time"]:
                fail("cairn fields differ from nccl-tests fields")
    if wrong_total != doc["cairn"]["wrong"]:
        fail("wrong total %d, JSON says %d" % (wrong_total, doc["cairn"]["wrong"]))
    if wrong_total != a.expect_wrong:
        fail("expected %d wrong elements, found %d" % (a.expect_wrong, wrong_total))
    # nccl-tests' "Out of bounds values" counts failed checks, a rank and placement each: at least one per row and
    # placement with wrong elements, at most one per rank there (and never more than the wrong elements).
    failed = doc["out_of_bounds"]["count"]
    max_ranks = max((r["ranks"] for r in results), default=1)
    if not failed_cells <= failed <= min(wrong_total, failed_cells * max_ranks):
        fail("out_of_bounds %d for %d failed row/placements, %d wrong elements" % (failed, failed_cells, wrong_total))
    want_failed = a.expect_wrong if a.expect_failed_checks is None else a.expect_failed_checks
    if failed != want_failed or failed != doc["cairn"]["failed_checks"]:
        fail("expected %d failed checks, JSON says %d (cairn: %d)" % (want_failed, failed, doc["cairn"]["failed_checks"]))
    oob_lines = [l for l in txt.splitlines() if l.startswith("# Out of bounds values")]
    if sum(int(l.split(":")[1].split()[0]) for l in oob_lines) != failed:
        fail("footers' Out of bounds values %r do not add up to %d" % (oob_lines, failed))

    # Footers: one "# Avg bus bandwidth" per (tier, collective) table, as one nccl-tests run: the
    # mean busbw (oop and ip) of all its rows, every type/op/root.
    avg_lines = [l for l in txt.splitlines() if l.startswith("# Avg bus bandwidth")]
    blocks = doc["cairn"]["blocks"]
    runs = doc["cairn"]["runs"]
    if len(avg_lines) != len(runs):
        fail("%d footers for %d runs" % (len(avg_lines), len(runs)))
    i = 0
    for line, run in zip(avg_lines, runs):
        k = len(run["results"])
        mine = results[i:i + k]
        i += k
        if any((r["collective"], r["tier"]) != (run["collective"], run["tier"]) for r in mine):
            fail("run %s/%s does not match the results list" % (run["collective"], run["tier"]))
        mean = sum(r["out_of_place"]["bus_bw"] + r["in_place"]["bus_bw"] for r in mine) / (2 * k)
        if abs(run["average_bus_bandwidth"]["bandwidth"] - mean) > 1e-9 * (1 + mean):
            fail("run %s/%s average %r != %g" % (run["collective"], run["tier"], run["average_bus_bandwidth"], mean))
        printed = float(line.split(":")[1].split()[0])
        if abs(printed - mean) > 1e-5 * (1 + mean):
            fail("footer %s != mean busbw %g" % (line, mean))

    # HDF5: the same numbers per block, plus topology and provenance.
    with h5py.File(a.outdir + "/sweep.h5", "r") as f:
        names = sorted(f["blocks"].keys())
        if len(names) != len(blocks):
            fail("sweep.h5 has %d blocks, JSON %d" % (len(names), len(blocks)))
        i = 0
        for name, b in zip(names, blocks):
            g = f["blocks"][name]
            if g.attrs["collective"] != b["collective"] or g.attrs["tier"] != b["tier"]:
                fail("h5 block %s is not %r" % (name, b))
            sizes = list(g["size"][...])
            mine = results[i:i + len(sizes)]
            i += len(sizes)
            for j, r in enumerate(mine):
                if sizes[j] != r["size"] or g["count"][j] != r["count"]:
                    fail("h5 %s row %d size/count differ" % (name, j))
                if g["oop_busbw"][j] != r["out_of_place"]["bus_bw"] or g["ip_time_us"][j] != r["in_place"]["time"]:
                    fail("h5 %s row %d numbers differ from JSON" % (name, j))
                w = g["oop_wrong"][j]
                if (r["out_of_place"]["nwrong"] is None) != (w < 0):
                    fail("h5 %s row %d checked flag differs" % (name, j))
        if "tool" not in f.attrs or "hosts_by_rank" not in f["topology"]:
            fail("sweep.h5 lacks provenance or topology")
        if len(f["topology"]["hosts_by_rank"]) != len(doc["config"]["devices"]):
            fail("sweep.h5 topology size differs")

    fabric = tomllib.load(open(a.outdir + "/fabric.toml", "rb"))
    if fabric["fabric"]["world_size"] != len(doc["config"]["devices"]):
        fail("fabric.toml world_size")
    primaries = set()
    chosen = {}  # sub-table key -> its fit: the first valid one of its measurements (-r -1, repeated types/ops)
    for fit in doc["cairn"]["fits"]:
        key = (fit["tier"], fit["collective"], fit["type"], fit["redop"])
        if fit["valid"] and key not in chosen:
            chosen[key] = fit
        if fit["in_sub_table"] != (chosen.get(key) is fit):
            fail("fit %r: in_sub_table is not the first valid fit of its sub-table" % (key,))
        if fit["in_fabric"] and not fit["in_sub_table"]:
            fail("fit %r: [tier.collective] holds a fit that is not its sub-table's" % (key,))
    # A sub-table is written or listed as skipped (no valid fit in any of its measurements), never both.
    skipped = {line.split(":")[0] for line in fabric["fabric"].get("skipped", [])}
    for key in {(f["tier"], f["collective"], f["type"], f["redop"]) for f in doc["cairn"]["fits"]}:
        dotted = ".".join(key if key[3] != "none" else key[:3])
        if (key in chosen) == (dotted in skipped):
            fail("fabric.toml: %s is %s" % (dotted, "written and skipped" if key in chosen else "neither written nor skipped"))
    for fit in doc["cairn"]["fits"]:
        if not fit["in_sub_table"]:
            continue
        coll = fabric[fit["tier"]][fit["collective"]]
        # Every type/op has [tier.collective.type.redop] ([tier.collective.type] without a reduction);
        # the primary one is also [tier.collective] itself, the table cairn-plan reads.
        sub = coll.get(fit["type"], {})
        if fit["redop"] != "none":
            sub = sub.get(fit["redop"], {})
        tables = [("%s.%s.%s.%s" % (fit["tier"], fit["collective"], fit["type"], fit["redop"]), sub)]
        if fit["in_fabric"]:
            primaries.add((fit["tier"], fit["collective"]))
            tables.append(("%s.%s" % (fit["tier"], fit["collective"]), coll))
            if (coll.get("type"), coll.get("redop")) != (fit["type"], fit["redop"]):
                fail("fabric.toml %s.%s names type/redop %r/%r, JSON %r/%r" % (fit["tier"], fit["collective"],
                     coll.get("type"), coll.get("redop"), fit["type"], fit["redop"]))
        for where, t in tables:
            for key in ("alpha_us", "busbw_gbps", "r2", "half_peak_bytes", "peak_busbw_gbps", "ranks"):
                if t.get(key) != fit[key]:
                    fail("fabric.toml %s.%s = %r, JSON %r" % (where, key, t.get(key), fit[key]))
    for tier, colls in fabric.items():
        if tier == "fabric":
            continue
        for name, coll in colls.items():
            if "alpha_us" in coll and (tier, name) not in primaries:
                fail("fabric.toml [%s.%s] has a fit no JSON fit is marked in_fabric for" % (tier, name))
    print("check_sweep: ok: %d rows in %d blocks, %d wrong" % (len(rows), len(blocks), wrong_total))


if __name__ == "__main__":
    main()
