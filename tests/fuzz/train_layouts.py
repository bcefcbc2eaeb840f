#!/usr/bin/python3
"""Seeded random cairn-train layouts against 1 rank: every run must give the 1-rank losses and gradient norms.

Draws layouts the fixed table of tests/train/layouts.sh does not list: any mix of dp, tp (1, 2, 4), pp (1-3, uneven
stage_layers when the layers do not divide), interleaving, cp with either K/V exchange, ZeRO 0-3, sp, every recompute
mode and micro-batch 1 or 2, on 2-8 ranks (mpirun --oversubscribe), 4-7 layers. Each trains 8 steps of a tiny GPT on
the fortunes corpus; losses must match the 1-rank run of the same model, micro-batch and recompute mode within 1e-5
relative and gradient norms within 1e-4 (fp32 sums in another order). Every drawn layout is valid: a refusal fails.

  tests/fuzz/train_layouts.py --bin build/bin [--seed N] [--count K] [--keep DIR]

ctest runs seed 7 with 6 layouts (fuzz_train_layouts); other seeds explore further (40 layouts: about 4 minutes on 2
cores).
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
GLOBAL_BATCH = 8


def draw(rng):
    """One layout cairn-train must accept: (ranks, layers, micro-batch, recompute, [--set ...], description)."""
    while True:
        tp, pp, cp, dp = rng.choice([1, 2, 4]), rng.choice([1, 2, 3]), rng.choice([1, 2]), rng.choice([1, 2])
        world = tp * pp * cp * dp
        if world == 1 or world > 8:
            continue
        v = rng.choice([1, 2]) if pp > 1 else 1
        layers, mb = rng.choice([4, 5, 6, 7]), rng.choice([1, 2])
        if GLOBAL_BATCH % (dp * mb):
            continue
        if v > 1 and (layers % (pp * v) or (GLOBAL_BATCH // (dp * mb)) % pp):
            continue  # interleaving wants whole chunks and micro-batches in multiples of pp
        zero = rng.choice([0, 1, 2, 3]) if dp * cp > 1 else 0
        sp = rng.choice(["on", "off"]) if tp > 1 else "off"
        recompute, cp_comm = rng.choice(["none", "selective", "full"]), rng.choice(["p2p", "allgather"])
        sets = {"dp": dp, "tp": tp, "pp": pp, "v": v, "cp": cp, "zero": zero, "sp": f'"{sp}"',
                "recompute": f'"{recompute}"', "cp_comm": f'"{cp_comm}"'}
        if pp > 1 and v == 1 and (layers % pp or rng.random() < 0.4):
            cuts = sorted(rng.sample(range(1, layers), pp - 1))
            sets["stage_layers"] = "[" + ",".join(str(b - a) for a, b in zip([0] + cuts, cuts + [layers])) + "]"
        args = [x for k, val in sets.items() for x in ("--set", f"parallel.{k}={val}")]
        desc = " ".join(f"{k}={val}".replace('"', "") for k, val in sets.items()) + f" mb={mb} layers={layers}"
        return world, layers, mb, recompute, args + ["--set", f"train.micro_batch={mb}"], desc


def train(binary, out, ranks, layers, extra, data):
    cmd = [os.path.join(binary, "cairn-train"), "--out", out, "--data", data, "--threads", "1", "--steps", "8",
           "--log-level", "warn", "--set", "model.hidden=32", "--set", "model.heads=4", "--set", "model.seq_len=32",
           "--set", f"model.layers={layers}", "--set", f"train.global_batch={GLOBAL_BATCH}", "--set",
           "train.warmup=2", "--set", "train.lr=0.001", "--set", "train.eps=1e-5", "--set", "train.spike_zscore=0",
           "--set", "train.checkpoint_every=0", "--set", "train.val_every=0"] + extra
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    if p.returncode != 0:
        return None, p.returncode, p.stderr
    with open(os.path.join(out, "train", "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    return [(x["loss"], x["grad_norm"]) for x in lines if x["kind"] == "train"], 0, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("CAIRN_BIN_DIR", "build/bin"))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--count", type=int, default=6)
    ap.add_argument("--keep", help="keep the runs in this directory")
    args = ap.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="cairn_layout_fuzz.")
    os.makedirs(work, exist_ok=True)
    try:
        data = os.path.join(work, "ds")
        subprocess.run([os.path.join(args.bin, "cairn-reshard"), "--log-level", "error", "--out", data, "--set",
                        'data.delimiter="%"', "build", "/usr/share/games/fortunes/fortunes"], check=True, env=ENV)
        rng, refs, failures = random.Random(args.seed), {}, []
        for i in range(args.count):
            ranks, layers, mb, recompute, extra, desc = draw(rng)
            key = (layers, mb, recompute)
            if key not in refs:
                ref, rc, err = train(args.bin, os.path.join(work, "ref_%d_%d_%s" % key), 1, layers,
                                     ["--set", f"train.micro_batch={mb}", "--set", f'parallel.recompute="{recompute}"'],
                                     data)
                if ref is None:
                    sys.exit(f"FAIL: the 1-rank reference {key} exited {rc}: {err[-2000:]}")
                refs[key] = ref
            got, rc, err = train(args.bin, os.path.join(work, f"layout{i}"), ranks, layers, extra, data)
            if got is None:
                failures.append(f"{desc} ({ranks} ranks): exit {rc}: {err.strip().splitlines()[:3]}")
                print(f"FAIL {desc}: exit {rc}", flush=True)
                continue
            want = refs[key]
            dl = max(abs(a[0] - b[0]) / abs(b[0]) for a, b in zip(got, want))
            dg = max(abs(a[1] - b[1]) / abs(b[1]) for a, b in zip(got, want))
            ok = len(got) == len(want) == 8 and dl <= 1e-5 and dg <= 1e-4
            print(f"{'ok  ' if ok else 'FAIL'} {desc} ({ranks} ranks): loss {dl:.1e}, grad norm {dg:.1e} relative",
                  flush=True)
            if not ok:
                failures.append(f"{desc}: {len(got)} steps, loss {dl:.3e}, grad norm {dg:.3e} from 1 rank's")
        if failures:
            print("\n".join(["FAIL: layouts that differ from 1 rank (seed %d):" % args.seed] + failures),
                  file=sys.stderr)
            sys.exit(1)
        print(f"{args.count} random layouts (seed {args.seed}) match 1 rank")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
