#!/usr/bin/env python3
"""Checks that a cairn-train trace.json is a well-formed Chrome trace (what Perfetto and Chrome DevTools need).

usage: check_trace.py TRACE --steps A:B [--ranks N] [--validation-after STEP ...] [--pipeline]

- every complete event ("X") has integer ts and dur >= 0, microseconds from the trace start (the first is 0);
- on every (pid, tid) row any two events are disjoint or one lies inside the other (no partial overlap), and the
  comm rows (tid >= 1) are flat: no two events overlap or nest;
- on the compute row (tid 0) every event has the parent its kind needs and starts no earlier than it: "step N"
  and "validation" are top level, phases lie inside a step (validation's inside "validation"), per-layer events
  inside a forward / backward phase of the same direction;
- the "step N" events are exactly the 1-based steps A..B-1 on every rank (--trace-steps A:B);
- each --validation-after STEP has one "validation" event per rank after "step STEP"; its first "forward
  embeddings" (rank 0) starts inside it, not at an earlier training forward;
- with --pipeline, every rank has "pipeline wait" events on a comm row.
"""
import argparse
import json
import sys
from collections import defaultdict

failures = []


def check(ok, msg):
    if not ok:
        failures.append(msg)
    return ok


def end(e):
    return e["ts"] + e["dur"]


def inside(c, p):
    return c is not p and p["ts"] <= c["ts"] and end(c) <= end(p)


def show(e):
    return f'{e["name"]!r} (pid {e["pid"]} tid {e["tid"]} ts {e["ts"]} dur {e["dur"]})'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", required=True, help="A:B as given to --trace-steps")
    ap.add_argument("--ranks", type=int, default=None)
    ap.add_argument("--validation-after", type=int, action="append", default=[])
    ap.add_argument("--pipeline", action="store_true")
    args = ap.parse_args()
    a, b = (int(x) for x in args.steps.split(":"))

    trace = json.load(open(args.trace))
    events = trace["traceEvents"]
    other = trace.get("otherData", {})
    check((other.get("first_step"), other.get("last_step")) == (a, b - 1),
          f"otherData says steps {other.get('first_step')}..{other.get('last_step')}, expected {a}..{b - 1}")
    xs = [e for e in events if e.get("ph") == "X"]
    check(all(e.get("ph") in ("X", "M") for e in events), "events other than complete (X) and metadata (M)")
    check(xs, "no complete events")

    # Integer microseconds, relative to the trace start.
    for e in xs:
        ok = type(e["ts"]) is int and type(e["dur"]) is int
        check(ok, f"non-integer ts/dur: {show(e)}")
        check(not ok or e["dur"] >= 0, f"negative duration: {show(e)}")
    if failures:
        return
    check(min(e["ts"] for e in xs) == 0, f"the trace does not start at ts 0 (first ts {min(e['ts'] for e in xs)})")

    pids = sorted({e["pid"] for e in xs})
    if args.ranks is not None:
        check(pids == list(range(args.ranks)), f"process rows {pids}, expected ranks 0..{args.ranks - 1}")

    # Every row named (metadata), so the viewer labels compute and comm rows.
    named = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    rows = defaultdict(list)
    for e in xs:
        rows[(e["pid"], e["tid"])].append(e)
    for row in rows:
        check(row in named, f"row pid {row[0]} tid {row[1]} has no thread_name")

    # Nesting: on each row, events are disjoint or nested (a laminar family); comm rows are flat.
    for (pid, tid), evs in rows.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            while stack and end(stack[-1]) <= e["ts"]:  # ended before e starts (touching is not overlapping)
                stack.pop()
            if stack:
                p = stack[-1]
                check(inside(e, p), f"partial overlap on pid {pid} tid {tid}: {show(e)} vs {show(p)}")
                check(tid == 0, f"comm row pid {pid} tid {tid}: {show(e)} overlaps {show(p)} (comm rows must be flat)")
            stack.append(e)
        if tid != 0:
            starts = [e["ts"] for e in evs]
            check(len(starts) == len(set(starts)), f"comm row pid {pid} tid {tid}: two events start together")

    # Parents on the compute row.
    for pid in pids:
        evs = rows.get((pid, 0), [])
        tops = [e for e in evs if e.get("cat") == "step" or e["name"] == "validation"]
        for t in tops:
            outer = [p for p in evs if inside(t, p) and p["dur"] > t["dur"]]
            check(not outer, f"{show(t)} is not top level: inside {show(outer[0]) if outer else ''}")
        for e in evs:
            cat, name = e.get("cat"), e["name"]
            if cat == "phase" and name != "validation":
                val = bool((e.get("args") or {}).get("validation"))
                want = (lambda p: p["name"] == "validation") if val else (lambda p: p.get("cat") == "step")
                check(any(want(p) and inside(e, p) for p in tops),
                      f"{show(e)} is not inside its {'validation' if val else 'step'} event")
            elif cat == "layer":
                direction = name.split(" ")[0]  # "forward" / "backward"
                check(direction in ("forward", "backward"), f"layer event with an odd name: {show(e)}")
                check(any(p.get("cat") == "phase" and p["name"] == direction and inside(e, p) for p in evs),
                      f"{show(e)} starts before (or ends after) every {direction} phase: no parent")
            elif cat not in ("step", "phase"):
                check(False, f"unexpected category {cat!r} on the compute row: {show(e)}")

        # Steps: exactly a..b-1, 1-based, once each.
        steps = sorted(int(e["name"].split()[1]) for e in evs if e.get("cat") == "step")
        check(steps == list(range(a, b)), f"rank {pid}: traced steps {steps}, expected {list(range(a, b))} "
                                           f"(--trace-steps {a}:{b})")
        for name in ("forward", "backward", "optimizer"):
            check(any(e["name"] == name for e in evs), f"rank {pid}: no {name!r} event")

        # Validation passes: after their step, the first forward embeddings inside them.
        vals = sorted((e for e in evs if e["name"] == "validation"), key=lambda e: e["ts"])
        check(len(vals) == len(args.validation_after),
              f"rank {pid}: {len(vals)} validation events, expected {len(args.validation_after)}")
        for v, after in zip(vals, sorted(args.validation_after)):
            st = [e for e in evs if e.get("cat") == "step" and e["name"] == f"step {after}"]
            check(st and st[0]["ts"] + st[0]["dur"] <= v["ts"], f"rank {pid}: validation does not follow step {after}")
            inner = [e for e in evs if inside(e, v)]
            check(any(e["name"] == "forward" for e in inner), f"rank {pid}: validation has no forward events")
            emb = [e for e in evs if e["name"] == "forward embeddings" and e["ts"] + e["dur"] > v["ts"]
                   and e["ts"] < end(v)]
            if pid == 0:
                check(emb, "rank 0: no 'forward embeddings' in the validation pass")
            if emb:
                first = min(emb, key=lambda e: e["ts"])
                check(first["ts"] >= v["ts"], f"rank {pid}: the first validation {show(first)} starts before "
                                               f"the validation event {show(v)}")
                check(first["dur"] <= v["dur"], f"rank {pid}: validation {show(first)} is longer than the pass")

        if args.pipeline:
            check(any(e["name"] == "pipeline wait" for (p, t), es in rows.items() if p == pid and t > 0 for e in es),
                  f"rank {pid}: no 'pipeline wait' on a comm row")

    other = trace.get("otherData", {})
    check(other.get("first_step") == a and other.get("last_step") == b - 1,
          f"otherData first_step/last_step {other.get('first_step')}/{other.get('last_step')}, expected {a}/{b - 1}")
    n_comm = sum(len(es) for (p, t), es in rows.items() if t > 0)
    print(f"{args.trace}: {len(xs)} events on {len(rows)} rows of {len(pids)} ranks ({n_comm} on comm rows), "
          f"steps {a}..{b - 1}, {len(args.validation_after)} validation pass(es): well-formed")


if __name__ == "__main__":
    try:
        main()
    except Exception as ex:  # a malformed file is a failure too, with its reason
        failures.append(f"{type(ex).__name__}: {ex}")
    if failures:
        print("\n".join("FAIL: " + f for f in failures[:40]), file=sys.stderr)
        if len(failures) > 40:
            print(f"... and {len(failures) - 40} more", file=sys.stderr)
        sys.exit(1)
