#!/usr/bin/env python3
"""Writes synthetic cairn run directories (sweep/, plan/, data/, train/, eval/) in the formats of
the brief, for cairn-report's tests and benchmark. Deterministic for a given --seed.

  make_runs.py DIR [--steps N] [--seed S] [--name NAME] [--loss-shift X] [--tps-factor F]
               [--busbw-factor F] [--wrong N] [--sweep-layout v3|flat] [--without sweep,eval,...] [--corrupt-lines K]
               [--restart-at STEP] [--no-finished]
"""
import argparse
import json
import math
import os
import random

COLLECTIVES = [("allreduce", lambda n: 2 * (n - 1) / n), ("allgather", lambda n: (n - 1) / n)]


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def provenance(tool):
    return {"tool": tool, "version": "0.1.0", "git_sha": "fixture", "host": "fixture",
            "time_utc": "2026-11-30T00:00:00Z", "command_line": tool + " (synthetic)"}


def make_sweep(d, rng, a):
    """sweep.json in cairn-sweep's layout (--sweep-layout v3: nccl-tests' version-3 -J document with
    cairn's fields under "cairn"), or the flat layout written before it (--sweep-layout flat)."""
    ranks = 8
    results, fits, runs = [], [], []
    tables = {"fabric": {"backend": "mpi", "world_size": ranks, "nodes": 2, "ranks_per_node": 4}}
    wrong_total = 0
    for coll, factor in COLLECTIVES:
        for tier, n, beta, alpha in (("world", ranks, 20.0, 12.0), ("intra", 4, 80.0, 4.0)):
            beta *= a.busbw_factor
            f = factor(n)
            size = 8
            peak = 0.0
            run_rows, run_wrong = [], 0
            while size <= 256 << 20:
                t = alpha * 1e-6 + size * f / (beta * 1e9)
                t *= 1 + rng.uniform(-0.03, 0.03)
                algbw = size / t / 1e9
                busbw = algbw * f
                peak = max(peak, busbw)
                wrong = a.wrong if (coll == "allreduce" and tier == "world" and size == 2048) else 0
                wrong_total += wrong
                run_wrong += wrong
                side = {"time_us": t * 1e6, "algbw": algbw, "busbw": busbw, "wrong": wrong}
                ip = dict(side, wrong=0)
                redop = "sum" if coll == "allreduce" else "none"
                if a.sweep_layout == "flat":
                    row = {"collective": coll, "tier": tier, "size": size, "count": size // 4, "type": "float",
                           "redop": redop, "root": -1, "oop": side, "ip": ip}
                else:
                    def nccl(m):
                        return {"time": m["time_us"], "alg_bw": m["algbw"], "bus_bw": m["busbw"],
                                "nwrong": float(m["wrong"])}
                    row = {"size": size, "count": size // 4, "type": "float", "redop": redop, "root": "    -1",
                           "out_of_place": nccl(side), "in_place": nccl(ip), "actual_iterations": 20,
                           "experiment_name": "",
                           "cairn": {"collective": coll, "tier": tier, "ranks": n, "oop": side, "ip": ip,
                                     "oop_cpu_time_us": side["time_us"], "ip_cpu_time_us": ip["time_us"]}}
                results.append(row)
                run_rows.append(row)
                size *= 4
            half = alpha * 1e-6 * beta * 1e9 / f
            fit = {"collective": coll, "tier": tier, "alpha_us": alpha, "busbw_gbps": beta, "r2": 0.998,
                   "half_peak_bytes": half, "peak_busbw_gbps": peak}
            if a.sweep_layout != "flat":
                fit.update(type="float", redop=redop, root=-1, ranks=n, valid=True, points=len(run_rows),
                           in_fabric=True)
            fits.append(fit)
            run_bw = sum(r["cairn"]["oop"]["busbw"] + r["cairn"]["ip"]["busbw"] for r in run_rows) / (
                2 * len(run_rows)) if a.sweep_layout != "flat" else 0
            runs.append({"collective": coll, "experiment": coll.replace("all", "all_") + "_perf", "tier": tier,
                         "ranks": n, "results": run_rows,
                         "out_of_bounds": {"count": run_wrong, "okay": "true" if run_wrong == 0 else "false"},
                         "average_bus_bandwidth": {"bandwidth": run_bw, "okay": "unchecked"}})
            tables[tier + "." + coll] = dict({k: v for k, v in fit.items()
                                              if k in ("alpha_us", "busbw_gbps", "r2", "half_peak_bytes",
                                                       "peak_busbw_gbps")}, ranks=n)
    side_of = (lambda r: r["oop"]) if a.sweep_layout == "flat" else (lambda r: r["cairn"]["oop"])
    avg = sum(side_of(r)["busbw"] for r in results) / len(results)
    if a.sweep_layout == "flat":
        doc = {"provenance": provenance("cairn-sweep"), "results": results, "fits": fits,
               "avg_busbw": avg, "wrong": wrong_total}
    else:
        # nccl-tests' keys at the top (their average_bus_bandwidth differs from cairn's avg_busbw on
        # purpose: the report must read cairn's).
        doc = {"version": 3, "start_time": "2026-11-30 00:00:00", "args": ["cairn-sweep", "all"],
               "env": [], "nccl_version": 0,
               "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": 8, "maximum_bytes": 256 << 20},
               "results": results,
               "out_of_bounds": {"count": wrong_total, "okay": "true" if wrong_total == 0 else "false"},
               "average_bus_bandwidth": {"bandwidth": avg * 0.5, "okay": "unchecked"},
               "errors": [], "end_time": "2026-11-30 00:01:00",
               "cairn": {"provenance": provenance("cairn-sweep"), "backend": "mpi", "runs": runs, "fits": fits,
                         "avg_busbw": avg, "wrong": wrong_total, "notes": []}}
    write(os.path.join(d, "sweep", "sweep.json"), json.dumps(doc, indent=1))
    toml = []
    for name, t in tables.items():
        toml.append("[%s]" % name)
        for k, v in t.items():
            toml.append("%s = %s" % (k, json.dumps(v)))
        toml.append("")
    write(os.path.join(d, "sweep", "fabric.toml"), "\n".join(toml))


def make_plan(d, rng, a):
    plans = []
    for i, (dp, tp, pp) in enumerate([(8, 1, 1), (4, 2, 1), (2, 4, 1), (2, 2, 2), (1, 8, 1), (1, 4, 2)]):
        st = 0.42 * (1 + 0.12 * i)
        plans.append({"dp": dp, "tp": tp, "pp": pp, "v": 1, "mb": 4, "zero": 1, "recompute": "none",
                      "sp": tp > 1, "step_time_s": st, "tokens_per_s": 524288 / st,
                      "tflops_per_gpu": 180 / (1 + 0.12 * i), "mfu": 0.45 / (1 + 0.12 * i),
                      "memory_gib": 40 + 5 * i, "breakdown": {"compute_s": st * 0.8, "comm_s": st * 0.2}})
    write(os.path.join(d, "plan", "plans.json"),
          json.dumps({"provenance": provenance("cairn-plan"), "plans": plans}, indent=1))
    write(os.path.join(d, "plan", "best.toml"), "[parallel]\ndp = 8\ntp = 1\npp = 1\n")


def make_data(d, rng, a):
    shards = []
    for k in range(8):
        tokens = 1_000_000 + rng.randint(-2000, 2000)
        shards.append({"k": k, "file": "shard_%05d.h5" % k, "tokens": tokens, "documents": 900 + k})
    total = sum(s["tokens"] for s in shards)
    write(os.path.join(d, "data", "index.json"),
          json.dumps({"format": "cairn-shards", "total_tokens": total, "total_documents": 7228,
                      "shards": shards, "provenance": provenance("cairn-reshard")}, indent=1))
    counts = [3, 10, 40, 150, 500, 1200, 2000, 1800, 1000, 400, 100, 25]
    edges = [1 << b for b in range(len(counts) + 1)]
    mean = total / len(shards)
    write(os.path.join(d, "data", "stats.json"),
          json.dumps({"provenance": provenance("cairn-reshard"), "tokens": total, "documents": 7228,
                      "bytes_per_token": 4.2, "shards": [{"file": s["file"], "tokens": s["tokens"]} for s in shards],
                      "tokens_per_shard": [s["tokens"] for s in shards],
                      "shard_imbalance": (max(s["tokens"] for s in shards) - mean) / mean,
                      "doc_length_histogram": {"edges": edges, "counts": counts}}, indent=1))


def make_train(d, rng, a):
    # As cairn-train writes it: each start records who wrote the lines after it and the peak their mfu divides by.
    lines = [json.dumps({"kind": "provenance", "step": 0, "provenance": provenance("cairn-train"),
                         "peak_tflops": 392.857})]
    n = a.steps
    skipped_total = 0
    tokens_per_step = 524288
    base_tps = 1.25e6 * a.tps_factor
    wall = 1_764_460_800.0
    for step in range(1, n + 1):
        frac = step / n
        loss = 2.6 + a.loss_shift + 8.3 * math.exp(-step / max(1.0, n / 12)) + rng.gauss(0, 0.04)
        if step == n // 3:
            loss += 3.0  # a spike the downsampled chart must keep
        warm = max(1, n // 50)
        lr = 6e-4 * step / warm if step < warm else 6e-5 + 0.5 * (6e-4 - 6e-5) * (1 + math.cos(math.pi * frac))
        skipped = 1 if step in (n // 4, n // 4 + 1, (2 * n) // 3) else 0
        skipped_total += skipped
        tps = base_tps * (0.3 if step <= 2 else 1.0) * (1 + rng.gauss(0, 0.01))
        total = tokens_per_step / tps
        t = {"data": total * 0.03, "forward": total * 0.28, "backward": total * 0.52, "comm": total * 0.09,
             "optimizer": total * 0.05, "total": total}
        wall += total
        lines.append(json.dumps({"kind": "train", "step": step, "tokens": step * tokens_per_step,
                                 "loss": round(loss, 5), "lr": lr, "grad_norm": 0.3 + 2.0 / math.sqrt(step) + abs(rng.gauss(0, 0.05)),
                                 "tokens_per_s": tps, "mfu": 0.42 * tps / 1.25e6, "tflops": 165 * tps / 1.25e6,
                                 "skipped": skipped, "skipped_total": skipped_total, "time_s": t,
                                 "wall_time": wall}, separators=(",", ":")))
        every = max(1, n // 10)
        if step % every == 0 or step == n:
            lines.append(json.dumps({"kind": "val", "step": step, "tokens": step * tokens_per_step,
                                     "val_loss": round(2.7 + a.loss_shift + 8.3 * math.exp(-step / max(1.0, n / 12)), 5)}))
    if a.restart_at:
        # A requeued job: it resumed from a checkpoint and rewrote the steps after it.
        redo = [l for l in lines if json.loads(l)["step"] >= a.restart_at]
        lines.extend(redo)
    for k in range(a.corrupt_lines):
        lines.insert(5 + 7 * k, '{"kind": "train", "step": 3, "loss": 3.1,,}')
    text = "\n".join(lines) + "\n"
    if a.torn_last:
        text += '{"kind":"train","step":%d,"loss":2.' % (n + 1)
    write(os.path.join(d, "train", "metrics.jsonl"), text)
    if not a.no_finished:
        write(os.path.join(d, "train", "FINISHED"), "")


def make_eval(d, rng, a):
    lines = []
    n = a.steps
    for step in sorted({max(1, n // 4), max(1, n // 2), n}):
        p = step / n
        for task, metric, value in (("hellaswag", "acc", 0.25 + 0.1 * p - a.loss_shift * 0.1),
                                    ("hellaswag", "acc_norm", 0.26 + 0.11 * p - a.loss_shift * 0.1),
                                    ("lambada", "ppl", 80 - 40 * p + a.loss_shift * 30)):
            lines.append(json.dumps({"step": step, "tokens": step * 524288, "checkpoint": "ckpt/step_%08d" % step,
                                     "task": task, "metric": metric, "value": value, "stderr": 0.004 if metric != "ppl" else 1.5,
                                     "wall_time": 1764460800.0 + step}))
    write(os.path.join(d, "eval", "results.jsonl"), "\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--name", default="")
    ap.add_argument("--loss-shift", type=float, default=0.0)
    ap.add_argument("--tps-factor", type=float, default=1.0)
    ap.add_argument("--busbw-factor", type=float, default=1.0)
    ap.add_argument("--wrong", type=int, default=0)
    ap.add_argument("--sweep-layout", choices=("v3", "flat"), default="v3",
                    help="sweep.json layout: v3 (cairn-sweep now) or flat (written before version 3)")
    ap.add_argument("--without", default="", help="comma-separated stages to leave out")
    ap.add_argument("--corrupt-lines", type=int, default=0)
    ap.add_argument("--torn-last", action="store_true")
    ap.add_argument("--restart-at", type=int, default=0)
    ap.add_argument("--no-finished", action="store_true")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    without = set(filter(None, a.without.split(",")))
    os.makedirs(a.dir, exist_ok=True)
    cfg = "[run]\ndir = %s\n" % json.dumps(a.dir)
    if a.name:
        cfg += "name = %s\n" % json.dumps(a.name)
    cfg += "\n[parallel]\ndp = 8\ntp = 1\npp = 1\n"
    write(os.path.join(a.dir, "config.toml"), cfg)
    for stage, fn in (("sweep", make_sweep), ("plan", make_plan), ("data", make_data), ("train", make_train),
                      ("eval", make_eval)):
        if stage not in without:
            fn(a.dir, rng, a)


if __name__ == "__main__":
    main()
