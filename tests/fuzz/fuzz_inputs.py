#!/usr/bin/env python3
"""Seeded fuzzing of the files stages exchange, through the real tools.

Each case mutates one input file (dataset index.json and shard tokens, fabric.toml, a cluster file,
config includes, one metrics.jsonl line, sweep.json and plans.json read by cairn-report, tokenizer
files and a dataset's tokenizer description), runs the tool under `timeout` and asserts: no crash, no
hang, no raw library message, exit 0/2/3 as the convention says, the offending file named, and
nothing written when a reshard/convert input is refused.

usage: fuzz_inputs.py KIND [--cases N] [--seed S]
       KIND: dataset|fabric|cluster|include|metrics|sweep|plans|tokenizer|all
"""
import argparse
import copy
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile

BIN = os.environ.get("CAIRN_BIN_DIR", "build/bin")
SRC = os.environ.get("CAIRN_SOURCE_DIR", ".")
TIMEOUT = 30
RAW = ["[json.exception", "type_error", "out_of_range", "std::", "terminate called", "basic_string", "what():"]

failures = []
counts = {}
exits = {}  # kind -> {exit code: cases}, printed so a run shows what the cases exercised


def run(cmd, **kw):
    try:
        p = subprocess.run(["timeout", "-k", "5", str(TIMEOUT)] + cmd, capture_output=True, text=True,
                           errors="replace", **kw)
    except Exception as e:  # pragma: no cover
        return 99, "", str(e)
    return p.returncode, p.stdout, p.stderr


def check(kind, desc, rc, out, err, allowed, must_name=None, extra=None):
    counts[kind] = counts.get(kind, 0) + 1
    exits.setdefault(kind, {})[rc] = exits.get(kind, {}).get(rc, 0) + 1
    text = out + err
    problems = []
    if rc in (124, 137):
        problems.append("hang (timeout)")
    elif rc not in allowed:
        problems.append(f"exit {rc}, wanted one of {sorted(allowed)}")
    for r in RAW:
        if r in err:
            problems.append(f"raw library message ({r!r})")
            break
    if rc not in (0,) and must_name:
        names = must_name if isinstance(must_name, (list, tuple)) else [must_name]
        if not any(n in text for n in names):
            problems.append(f"error does not name any of {names}")
    if extra:
        r = extra()
        if r:
            problems.append(r)
    if problems:
        failures.append(f"[{kind}] {desc}: " + "; ".join(problems) + f"\n    stderr: {err.strip()[-600:]}")


# Values that are wrong in most places.
def junk(rng):
    return rng.choice([None, "x", "", -1, -7.5, 1.5, 0, 2**64, 10**30, 1e300, True, False, [], [1, 2], {},
                       {"a": 1}, "0123456789abcdeg", "ffffffffffffffff", "12", "../../etc/passwd", "/abs", "NaN"])


def dump_json_with(obj):
    return json.dumps(obj)


# ----------------------------------------------------------------------------------------- dataset
def make_dataset(tmp):
    txt = os.path.join(tmp, "in.txt")
    rng = random.Random(7)
    with open(txt, "w") as f:
        for d in range(300):
            words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "eps", "zeta"]) for _ in range(rng.randint(3, 40)))
            f.write(words + "\n%\n")
    ds = os.path.join(tmp, "ds")
    rc, out, err = run([f"{BIN}/cairn-reshard", "build", "--delimiter", "%", "--shards", "4", "--out", ds, txt,
                        "--log-level", "warn"])
    if rc != 0:
        sys.exit(f"cannot build the base dataset: {err}")
    return ds


def token_offset(shard):
    import h5py
    with h5py.File(shard, "r") as h:
        return h["tokens"].id.get_offset(), h["tokens"].shape[0], h["tokens"].dtype.itemsize


def nothing_written(out):
    def f():
        if not os.path.exists(out):
            return None
        names = [n for n in os.listdir(out) if n.startswith("shard_") or n == "index.json" or n.endswith(".bin")]
        return f"output written although the input was refused: {names}" if names else None
    return f


def fuzz_dataset(rng, n, tmp):
    base = make_dataset(tmp)
    index = json.load(open(os.path.join(base, "index.json")))
    shard_files = [s["file"] for s in index["shards"]]
    for case in range(n):
        ds = os.path.join(tmp, f"d{case}")
        shutil.copytree(base, ds)
        ix = copy.deepcopy(index)
        what = rng.random()
        expect = {0, 2, 3}
        name = ["index.json"] + shard_files
        if what < 0.25:
            # Corrupt tokens in place (the classic laundering case): verify and every reader exit 3.
            sf = rng.choice(shard_files)
            off, ntok, item = token_offset(os.path.join(ds, sf))
            pos = off + rng.randrange(ntok * item)
            with open(os.path.join(ds, sf), "r+b") as f:
                f.seek(pos)
                b = f.read(1)
                f.seek(pos)
                f.write(bytes([(b[0] ^ rng.choice([1, 2, 4, 0x80]))]))
            desc = f"byte {pos} of {sf} flipped"
            expect = {3}
            name = [sf]
        elif what < 0.35:
            k = rng.randrange(len(ix["shards"]))
            v = ix["shards"][k]["xxh64"]
            ix["shards"][k]["xxh64"] = ("%016x" % (int(v, 16) ^ (1 << rng.randrange(64))))
            desc = f"shards[{k}].xxh64 changed to another valid checksum"
            expect = {3}
            name = [ix["shards"][k]["file"]]
        elif what < 0.42:
            ix["shards"] = []
            desc = "shards = []"
            expect = {2}
        elif what < 0.75:
            k = rng.randrange(len(ix["shards"]))
            key = rng.choice(["file", "tokens", "documents", "xxh64", None])
            if key is None:
                ix["shards"][k] = junk(rng)
                desc = f"shards[{k}] = {ix['shards'][k]!r}"
            elif rng.random() < 0.2:
                del ix["shards"][k][key]
                desc = f"shards[{k}].{key} removed"
            else:
                ix["shards"][k][key] = junk(rng)
                desc = f"shards[{k}].{key} = {ix['shards'][k][key]!r}"
            name = ["index.json"] + shard_files
        else:
            key = rng.choice(["format", "format_version", "vocab_size", "eot_id", "seed", "split_docs", "tokenizer",
                              "total_tokens", "shards", "skipped_records"])
            if rng.random() < 0.2:
                ix.pop(key, None)
                desc = f"{key} removed"
            else:
                ix[key] = junk(rng)
                desc = f"{key} = {ix[key]!r}"
        if what >= 0.25:
            text = json.dumps(ix)
            if rng.random() < 0.05:
                # Cut short, the index is no longer JSON, whatever the mutation before: bad input naming it.
                text = text[: rng.randrange(len(text))]
                desc += " (truncated)"
                expect, name = {2}, ["index.json"]
            with open(os.path.join(ds, "index.json"), "w") as f:
                f.write(text)
        sub = rng.choice(["reshard", "reshard", "convert", "verify", "stats"])
        out = os.path.join(tmp, f"o{case}")
        if sub == "reshard":
            cmd = [f"{BIN}/cairn-reshard", "reshard", ds, "--shards", str(rng.randint(1, 5)), "--out", out]
            if rng.random() < 0.5:
                cmd += ["--seed", "3"]
        elif sub == "convert":
            to = rng.choice(["llmc", "megatron"])
            cmd = [f"{BIN}/cairn-reshard", "convert", "--to", to, "--out",
                   os.path.join(out, "m") if to == "megatron" else out, ds]
        else:
            cmd = [f"{BIN}/cairn-reshard", sub, ds]
        allowed = set(expect)
        # verify reports a damaged index as a failed verification (3); the readers refuse it as bad input (2).
        if sub == "verify" and expect == {2}:
            allowed = {3}
        rc, o, e = run(cmd + ["--log-level", "warn"])
        check("dataset", f"case {case} {sub}: {desc}", rc, o, e, allowed, name,
              nothing_written(out) if sub in ("reshard", "convert") and rc != 0 else None)
        shutil.rmtree(ds, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)


# ------------------------------------------------------------------------------------ fabric/cluster
FABRIC = """[fabric]
nodes = 1
ranks_per_node = 8

[intra.allreduce]
alpha_us = 12.5
busbw_gbps = 150.0
ranks = 8

[intra.allgather]
alpha_us = 10.0
busbw_gbps = 140.0
ranks = 8

[world.allreduce]
alpha_us = 20.0
busbw_gbps = 90.0
ranks = 8
"""

# Whole numbers in float or exponent notation (1e3, 4.0) are integers to an integer key; 1e19 is past int64.
TOML_JUNK = ["nan", "-nan", "inf", "-inf", "-1", "-0.5", "0", "\"x\"", "\"\"", "true", "[1, 2]", "{ a = 1 }",
             "1e400", "9223372036854775807", "-9223372036854775808", "2024-01-01", "1e3", "4.0", "1e19", "1e-3"]

PLAN = ["--config", "configs/models/gpt2-350m.toml", "--config", "configs/clusters/dgx-a100-80gb.toml",
        "--set", "train.global_batch=64"]


def mutate_toml(rng, text):
    lines = text.splitlines()
    idx = [i for i, l in enumerate(lines) if "=" in l and not l.startswith("[")]
    i = rng.choice(idx)
    key = lines[i].split("=")[0].strip()
    if rng.random() < 0.1:
        lines[i] = ""
        return "\n".join(lines) + "\n", f"{key} removed"
    v = rng.choice(TOML_JUNK)
    lines[i] = f"{key} = {v}"
    return "\n".join(lines) + "\n", f"{key} = {v}"


def no_nan_plan(outdir):
    def f():
        b = os.path.join(outdir, "plan", "best.toml")
        if os.path.exists(b) and "nan" in open(b).read().lower():
            return "best.toml predicts nan"
        return None
    return f


def fuzz_fabric(rng, n, tmp):
    for case in range(n):
        text, desc = mutate_toml(rng, FABRIC)
        path = os.path.join(tmp, f"fabric{case}.toml")
        open(path, "w").write(text)
        outdir = os.path.join(tmp, f"pf{case}")
        rc, o, e = run([f"{BIN}/cairn-plan"] + PLAN + ["--set", f"cluster.fabric={path}", "--out", outdir,
                                                       "--log-level", "warn"], cwd=SRC)
        check("fabric", f"case {case}: {desc}", rc, o, e, {0, 2, 3}, [path], no_nan_plan(outdir))
        shutil.rmtree(outdir, ignore_errors=True)


def fuzz_cluster(rng, n, tmp):
    base = open(os.path.join(SRC, "configs/clusters/dgx-a100-80gb.toml")).read()
    for case in range(n):
        text, desc = mutate_toml(rng, base)
        path = os.path.join(tmp, f"cluster{case}.toml")
        open(path, "w").write(text)
        outdir = os.path.join(tmp, f"pc{case}")
        rc, o, e = run([f"{BIN}/cairn-plan", "--config", "configs/models/gpt2-350m.toml", "--config", path,
                        "--set", "train.global_batch=64", "--out", outdir, "--log-level", "warn"], cwd=SRC)
        check("cluster", f"case {case}: {desc}", rc, o, e, {0, 2, 3}, [path], no_nan_plan(outdir))
        shutil.rmtree(outdir, ignore_errors=True)


# ------------------------------------------------------------------------------------------ include
def fuzz_include(rng, n, tmp):
    d = os.path.join(tmp, "inc")
    os.makedirs(os.path.join(d, "a-directory"), exist_ok=True)
    fifo = os.path.join(d, "a-fifo")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    open(os.path.join(d, "good.toml"), "w").write("[train]\nsteps = 5\n")
    open(os.path.join(d, "garbage.toml"), "w").write("[train\nsteps = = 5\n")
    os.symlink("a-directory", os.path.join(d, "link-to-dir"))
    targets = [("a-directory", {2}), ("", {2}), ("a-fifo", {2}), ("missing.toml", {2}), ("garbage.toml", {2}),
               ("link-to-dir", {2}), ("/dev/null", {2}), (".", {2}), ("good.toml", {0}), ("/dev/zero", {2})]
    for case in range(n):
        t, allowed = rng.choice(targets)
        form = rng.choice(["list", "string", "list2"])
        if form == "list":
            inc = f"include = [{json.dumps(t)}]"
        elif form == "string":
            inc = f"include = {json.dumps(t)}"
        else:
            inc = f"include = [\"good.toml\", {json.dumps(t)}]"
        main = os.path.join(d, f"main{case}.toml")
        open(main, "w").write(inc + "\n[train]\nseed = 3\n")
        rc, o, e = run([f"{BIN}/cairn-plan", "--config", main, "--print-config"], cwd=SRC)
        # The including file:line, or (for a broken TOML file) the included file's own position.
        check("include", f"case {case}: {inc}", rc, o, e, allowed, [f"main{case}.toml"] + ([t + ":"] if t else []))
    # A --config that is a directory or FIFO-less path is an error too.
    rc, o, e = run([f"{BIN}/cairn-plan", "--config", os.path.join(d, "a-directory"), "--print-config"], cwd=SRC)
    check("include", "--config a-directory", rc, o, e, {2}, ["a-directory"])


# ------------------------------------------------------------------------------------------ metrics
BAD_LINES = ['{"kind": "train", "step": 1e999999, "loss": 2.0}', '{"kind": "train", "step": 5, "loss": -1e999999}',
             '{"step": 1e999999}', '{"kind": "val", "step": 4, "val_loss": 1e400}', '1e999999', '[1e999999]',
             '{"kind": "train", "step": null, "loss": 1}', '{"kind": "train", "step": "x"}', '{"kind": 7}',
             '{"kind": "val", "step": 3}', 'NaN', '{"loss": NaN}', '{"kind": "train", "step": 1', '\x00\x01\x02',
             '{"kind": "\\u0074rain", "step": 1e999999}', '[' * 5000, '{"a":' * 3000, '"just a string"', '{}',
             '{"kind": "train", "step": 2, "loss": "1.0"}', '{"kind": "train", "step": -1e308, "loss": 1e308}']


def fuzz_metrics(rng, n, tmp):
    for case in range(n):
        run_dir = os.path.join(tmp, f"run{case}")
        os.makedirs(os.path.join(run_dir, "train"))
        lines = []
        for s in range(1, 21):
            lines.append(json.dumps({"kind": "train", "step": s, "tokens": s * 1024, "loss": 5.0 / s, "lr": 1e-3,
                                     "tokens_per_s": 1000.0, "wall_time": s * 0.1}))
            if s % 5 == 0:
                lines.append(json.dumps({"kind": "val", "step": s, "tokens": s * 1024, "val_loss": 5.0 / s}))
        bad = rng.choice(BAD_LINES)
        at = rng.randrange(len(lines) + 1)
        lines.insert(at, bad)
        with open(os.path.join(run_dir, "train", "metrics.jsonl"), "w") as f:
            f.write("\n".join(lines) + "\n")
        outdir = os.path.join(tmp, f"rep{case}")
        rc, o, e = run([f"{BIN}/cairn-report", run_dir, "--out", outdir, "--json", os.path.join(tmp, f"r{case}.json"),
                        "--log-level", "warn"], cwd=SRC)

        def counted(case=case):
            p = os.path.join(tmp, f"r{case}.json")
            if not os.path.exists(p):
                return "no --json summary written"
            s = json.load(open(p))
            runs = s.get("runs", [])
            if not runs:
                return "no run in the summary"
            if ("1e999999" in bad or "1e400" in bad) and runs[0].get("problem_count", 0) < 1:
                return "the bad line was not counted as a problem"
            return None
        check("metrics", f"case {case}: line {at + 1} = {bad[:60]!r}", rc, o, e, {0}, None, counted)
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(outdir, ignore_errors=True)


# ------------------------------------------------------------------------------- sweep.json / plans.json
def json_paths(obj, prefix=()):
    """The path (tuple of keys and indices) of every value inside obj."""
    out = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else []
    for k, v in items:
        out.append(prefix + (k,))
        out += json_paths(v, prefix + (k,))
    return out


def at_path(obj, path):
    for p in path:
        obj = obj[p]
    return obj


def mutate_json(rng, doc, read_keys):
    """One mutation of a JSON document: (text, description, must_fail). Text-level damage (a number a
    double cannot hold, NaN, truncation, a non-object document) must be refused; a wrong value in a
    key may be refused (exit 2) or ignored where the reader does not use it (exit 0)."""
    doc = copy.deepcopy(doc)
    paths = json_paths(doc)
    what = rng.random()
    if what < 0.15:
        leaves = [p for p in paths if isinstance(at_path(doc, p), (int, float)) and not isinstance(at_path(doc, p), bool)]
        p = rng.choice(leaves)
        bad = rng.choice(["1e999999", "-1e400", "NaN", "Infinity", "1" * 400 + ".5e999"])
        at_path(doc, p[:-1])[p[-1]] = "@@BAD@@"
        return json.dumps(doc).replace('"@@BAD@@"', bad), f"{'.'.join(map(str, p))} = {bad[:20]} (text)", True
    if what < 0.20:
        text = json.dumps(doc)
        cut = rng.randrange(len(text))
        return text[:cut], f"truncated at byte {cut}", True
    if what < 0.23:
        v = rng.choice([[], [1], "x", 3, None, True])
        return json.dumps(v), f"document = {v!r}", True
    preferred = [p for p in paths if (isinstance(p[-1], str) and p[-1] in read_keys) or
                 (len(p) > 1 and isinstance(p[-1], int) and p[-2] in read_keys)]
    p = rng.choice(preferred if preferred and rng.random() < 0.8 else paths)
    parent = at_path(doc, p[:-1])
    if rng.random() < 0.15 and isinstance(parent, dict):
        del parent[p[-1]]
        desc = f"{'.'.join(map(str, p))} removed"
    else:
        parent[p[-1]] = junk(rng)
        desc = f"{'.'.join(map(str, p))} = {parent[p[-1]]!r}"
    return json.dumps(doc), desc, False


def names_key_or_why(rc, err):
    def f():
        if rc == 2 and not any(w in err for w in ('key "', "invalid JSON", "expected a table/object")):
            return "exit 2 without naming the key or the JSON error"
        return None
    return f


SWEEP_KEYS = {"results", "cairn", "fits", "collective", "tier", "type", "redop", "root", "size", "count", "oop",
              "ip", "busbw", "algbw", "wrong", "time_us", "out_of_place", "in_place", "bus_bw", "alg_bw", "nwrong",
              "time", "avg_busbw", "average_bus_bandwidth", "bandwidth", "out_of_bounds", "alpha_us",
              "busbw_gbps", "r2", "half_peak_bytes", "peak_busbw_gbps", "valid", "in_fabric", "points", "ranks"}
PLAN_KEYS = {"plans", "dp", "tp", "pp", "v", "mb", "zero", "recompute", "sp", "step_time_s", "tokens_per_s",
             "tflops_per_gpu", "hw_tflops_per_gpu", "mfu", "hfu", "memory_gib", "feasible", "reason"}


def report_bases(tmp, stage, fname):
    """Base documents: make_runs.py's (both sweep layouts), and the real tool's output when it runs here."""
    bases = []
    layouts = ["v3", "flat"] if stage == "sweep" else ["v3"]
    for layout in layouts:
        d = os.path.join(tmp, f"base-{stage}-{layout}")
        without = ",".join(x for x in ("sweep", "plan", "data", "train", "eval") if x != stage)
        subprocess.run([sys.executable, os.path.join(SRC, "tests/report/make_runs.py"), d, "--steps", "20",
                        "--sweep-layout", layout, "--without", without], check=True)
        bases.append((f"make_runs {layout}", json.load(open(os.path.join(d, stage, fname)))))
    real = os.path.join(tmp, f"real-{stage}")
    if stage == "sweep":
        rc, o, e = run([f"{BIN}/cairn-sweep", "--out", real, "allreduce,allgather,broadcast", "-b", "64", "-e", "4K",
                        "-n", "1", "-w", "0", "--log-level", "error"])
    else:
        rc, o, e = run([f"{BIN}/cairn-plan"] + PLAN + ["--out", real, "--log-level", "error"], cwd=SRC)
    if rc == 0:
        bases.append((f"cairn-{stage}", json.load(open(os.path.join(real, stage, fname)))))
    else:
        print(f"note: no real {fname} to fuzz (the tool exited {rc}: {e.strip()[-200:]})")
    return bases


def fuzz_report_file(rng, n, tmp, kind, stage, fname, read_keys):
    bases = report_bases(tmp, stage, fname)
    run_dir = os.path.join(tmp, f"fz-{stage}")
    os.makedirs(os.path.join(run_dir, stage), exist_ok=True)
    path = os.path.join(run_dir, stage, fname)
    for case in range(n):
        base_name, base = rng.choice(bases)
        text, desc, must_fail = mutate_json(rng, base, read_keys)
        with open(path, "w") as f:
            f.write(text)
        outdir = os.path.join(tmp, f"rep-{stage}{case}")
        rc, o, e = run([f"{BIN}/cairn-report", run_dir, "--out", outdir, "--log-level", "warn"], cwd=SRC)

        def extra(rc=rc, e=e, outdir=outdir):
            if rc == 0 and not os.path.exists(os.path.join(outdir, "report", "summary.json")):
                return "exit 0 without a report"
            return names_key_or_why(rc, e)()
        check(kind, f"case {case} ({base_name}): {desc}", rc, o, e, {2} if must_fail else {0, 2}, [path], extra)
        shutil.rmtree(outdir, ignore_errors=True)


def fuzz_sweep(rng, n, tmp):
    fuzz_report_file(rng, n, tmp, "sweep", "sweep", "sweep.json", SWEEP_KEYS)


def fuzz_plans(rng, n, tmp):
    fuzz_report_file(rng, n, tmp, "plans", "plan", "plans.json", PLAN_KEYS)


# ------------------------------------------------------------------------------------------ tokenizer
def bytes_to_unicode():
    """GPT-2's byte -> printable character table (byte-level BPE token spelling)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def tokenizer_files(tmp):
    """A small byte-level BPE tokenizer as tokenizer.json (hf) and encoder.json + vocab.bpe (gpt2)."""
    bu = bytes_to_unicode()
    vocab = {bu[b]: b for b in range(256)}
    merges = []
    for a, b in [("h", "e"), ("\u0120", "t"), ("\u0120t", "he"), ("q", "u"), ("\u0120", "f"), ("o", "x")]:
        merges.append(f"{a} {b}")
        vocab.setdefault(a + b, len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    hf = {"version": "1.0", "truncation": None, "padding": None, "normalizer": None,
          "added_tokens": [{"id": vocab["<|endoftext|>"], "content": "<|endoftext|>", "special": True}],
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "vocab": vocab, "merges": merges}}
    seq = copy.deepcopy(hf)
    seq["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\s+|\\S+"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}
    seq["model"]["merges"] = [m.split(" ") for m in merges]
    return hf, seq, vocab, merges


TOKENIZER_KEYS = {"model", "type", "vocab", "merges", "pre_tokenizer", "pretokenizers", "pattern", "Regex", "String",
                  "behavior", "invert", "add_prefix_space", "use_regex", "added_tokens", "id", "content",
                  "normalizer", "ignore_merges"}


def built(out):
    def f():
        return None if os.path.exists(os.path.join(out, "index.json")) else "exit 0 without a dataset"
    return f


def fuzz_tokenizer(rng, n, tmp):
    hf, seq, vocab, merges = tokenizer_files(tmp)
    text = os.path.join(tmp, "tok-in.txt")
    with open(text, "w") as f:
        f.write("the quick brown fox\n%\nthe end of the box\n%\nquux\n")
    # A dataset built with the hf tokenizer: its index.json "tokenizer" description is fuzzed too.
    tj = os.path.join(tmp, "tokenizer.json")
    json.dump(hf, open(tj, "w"))
    base_ds = os.path.join(tmp, "tok-ds")
    rc, o, e = run([f"{BIN}/cairn-reshard", "build", "--tokenizer", "hf", "--tokenizer-json", tj, "--delimiter", "%",
                    "--out", base_ds, text, "--log-level", "warn"])
    if rc != 0:
        sys.exit(f"cannot build the base dataset with the hf tokenizer: {e}")
    base_index = json.load(open(os.path.join(base_ds, "index.json")))
    for case in range(n):
        out = os.path.join(tmp, f"tok-o{case}")
        what = rng.random()
        if what < 0.6:  # tokenizer.json through cairn-reshard build
            base = rng.choice([hf, seq])
            body, desc, must_fail = mutate_json(rng, base, TOKENIZER_KEYS | set(vocab))
            path = os.path.join(tmp, f"tokenizer{case}.json")
            open(path, "w").write(body)
            cmd = ["--tokenizer", "hf", "--tokenizer-json", path]
            names = [path]
            allowed = {2} if must_fail else {0, 2}
        elif what < 0.8:  # GPT-2 encoder.json or vocab.bpe
            enc = os.path.join(tmp, f"encoder{case}.json")
            bpe = os.path.join(tmp, f"vocab{case}.bpe")
            lines = ["#version: 0.2"] + merges
            if rng.random() < 0.6:
                body, desc, must_fail = mutate_json(rng, vocab, set(vocab))
                open(enc, "w").write(body)
                open(bpe, "w").write("\n".join(lines) + "\n")
                names = [enc]
            else:
                json.dump(vocab, open(enc, "w"))
                i = rng.randrange(len(lines))
                lines[i] = rng.choice(["", "a", "a b c", " x", "\u0120q u", "zz zz", "\x00 \x01", "h"])
                desc, must_fail = f"vocab.bpe line {i + 1} = {lines[i]!r}", False
                open(bpe, "w").write("\n".join(lines) + "\n")
                names = [bpe]
            cmd = ["--tokenizer", "gpt2", "--vocab", enc, "--merges", bpe]
            allowed = {2} if must_fail else {0, 2}
        else:  # the dataset's tokenizer description, read back by verify
            ds = os.path.join(tmp, f"tok-d{case}")
            shutil.copytree(base_ds, ds)
            ix = copy.deepcopy(base_index)
            key = rng.choice(["type", "id", "files", "files.tokenizer_json", None])
            if key is None:
                ix["tokenizer"] = junk(rng)
                desc = f"tokenizer = {ix['tokenizer']!r}"
            else:
                obj, k = (ix["tokenizer"]["files"], "tokenizer_json") if key.startswith("files.") else (ix["tokenizer"], key)
                if rng.random() < 0.2:
                    obj.pop(k, None)
                    desc = f"tokenizer.{key} removed"
                else:
                    obj[k] = junk(rng)
                    desc = f"tokenizer.{key} = {obj[k]!r}"
            json.dump(ix, open(os.path.join(ds, "index.json"), "w"))
            rc, o, e = run([f"{BIN}/cairn-reshard", "verify", ds, "--log-level", "warn"])
            # verify names index.json, the tokenizer files, or the shards whose tokenizer attribute
            # no longer matches index.json's.
            check("tokenizer", f"case {case} verify: {desc}", rc, o, e, {0, 2, 3},
                  [os.path.join(ds, "index.json"), os.path.join(ds, "tokenizer"), "differs from index.json"])
            shutil.rmtree(ds, ignore_errors=True)
            continue
        rc, o, e = run([f"{BIN}/cairn-reshard", "build"] + cmd + ["--delimiter", "%", "--out", out, text,
                                                                   "--log-level", "warn"])
        check("tokenizer", f"case {case}: {desc}", rc, o, e, allowed, names,
              built(out) if rc == 0 else nothing_written(out))
        shutil.rmtree(out, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind")
    ap.add_argument("--cases", type=int, default=0)
    ap.add_argument("--seed", type=int, default=20240601)
    a = ap.parse_args()
    kinds = ["dataset", "fabric", "cluster", "include", "metrics", "sweep", "plans", "tokenizer"] \
        if a.kind == "all" else [a.kind]
    default = {"dataset": 160, "fabric": 80, "cluster": 60, "include": 40, "metrics": 60, "sweep": 200, "plans": 150,
               "tokenizer": 200}
    tmp = tempfile.mkdtemp(prefix="cairn-fuzz.")
    try:
        for k in kinds:
            rng = random.Random(f"{a.seed}:{k}")
            globals()["fuzz_" + k](rng, a.cases or default[k], tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for k, c in counts.items():
        print(f"{k}: {c} cases (" + ", ".join(f"exit {rc}: {m}" for rc, m in sorted(exits[k].items())) + ")")
    if failures:
        print(f"FAIL: {len(failures)} case(s)", file=sys.stderr)
        for f in failures[:60]:
            print(f, file=sys.stderr)
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
