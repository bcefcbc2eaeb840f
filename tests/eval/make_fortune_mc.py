#!/usr/bin/env python3
"""Builds cairn-eval's fortunes multiple-choice task: held-out fortunes cut in two; the choices are the
fortune's real ending and the endings of other fortunes. Deterministic for a given input and seed.

Output: JSONL lines {"context": ..., "choices": [...], "label": i, "source": "file:index"}.
Held out: with --dataset, the fortunes come from the dataset's validation tail (never trained on);
otherwise from fortune files (default: platitudes) that the training data must then leave out.
"""
import argparse
import json
import random
import sys


def read_fortunes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    docs, cur = [], []
    for line in text.split("\n"):
        if line == "%":
            docs.append("\n".join(cur))
            cur = []
        else:
            cur.append(line)
    if cur:
        docs.append("\n".join(cur))
    return docs


def heldout_dataset_documents(dataset, seq_len, val_fraction):
    """Texts of the documents in a cairn dataset's validation tail (cairn-train's split: windows of
    seq_len+1 tokens at stride seq_len, shard by shard, the last ceil(val_fraction * windows) held out),
    i.e. the documents cairn-eval's `split = "val"` scores; bytes or GPT-2 tokenizers."""
    import math
    import os
    import h5py  # Debian's python3-h5py: run with /usr/bin/python3
    index = json.load(open(os.path.join(dataset, "index.json")))
    tok = index["tokenizer"]
    tok_type = tok.get("type", tok) if isinstance(tok, dict) else tok
    if tok_type == "bytes":
        decode = lambda ids: bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")
    elif tok_type == "gpt2":
        enc = json.load(open(os.path.join(dataset, tok["files"]["vocab"]), encoding="utf-8"))
        bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
        cs, n = bs[:], 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        byte_of = {chr(c): b for b, c in zip(bs, cs)}
        inv = {v: k for k, v in enc.items()}
        decode = lambda ids: bytes(byte_of[ch] for i in ids if i in inv for ch in inv[i]).decode("utf-8", errors="replace")
    else:
        sys.exit(f"make_fortune_mc: tokenizer {tok_type!r} is not supported here (bytes, gpt2)")
    counts = [s["tokens"] for s in index["shards"]]
    first, total = [], 0
    for n in counts:
        first.append(total)
        total += (n - 1) // seq_len if n > seq_len else 0
    val = min(max(math.ceil(val_fraction * total), 1), total // 2)
    w = total - val
    shard = max(i for i in range(len(first)) if first[i] <= w)
    offset = (w - first[shard]) * seq_len
    texts = []
    for i, s in enumerate(index["shards"]):
        if i < shard:
            continue
        f = h5py.File(os.path.join(dataset, s["file"]), "r")
        offs, toks = f["doc_offsets"][...], f["tokens"]
        for d in range(len(offs) - 1):
            if i == shard and offs[d] < offset:
                continue
            texts.append(decode(toks[offs[d]:offs[d + 1]].tolist()))
    return texts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--input", action="append", help="fortune files (default: /usr/share/games/fortunes/platitudes)")
    ap.add_argument("--dataset", help="take the fortunes from this cairn dataset's validation tail instead")
    ap.add_argument("--seq-len", type=int, default=128, help="--dataset: the training run's [model] seq_len")
    ap.add_argument("--val-fraction", type=float, default=0.02, help="--dataset: the run's [data] val_fraction")
    ap.add_argument("--out", required=True, help="output JSONL path ('-' = stdout)")
    ap.add_argument("-n", "--examples", type=int, default=200)
    ap.add_argument("--choices", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--min-words", type=int, default=6)
    ap.add_argument("--max-chars", type=int, default=200)
    args = ap.parse_args()
    inputs = args.input or ["/usr/share/games/fortunes/platitudes"]

    pieces = []  # (source, context, ending)
    sources = [(p, read_fortunes(p)) for p in inputs]
    if args.dataset:
        sources = [(args.dataset.rstrip("/") + "/val", heldout_dataset_documents(args.dataset, args.seq_len, args.val_fraction))]
    for path, docs in sources:
        for i, doc in enumerate(docs):
            words = doc.split()
            text = " ".join(words)
            # Short single-thought fortunes; attributions ("-- Someone") would give the ending away.
            if len(words) < args.min_words or len(text) > args.max_chars or "--" in text:
                continue
            cut = max(3, (len(words) * 3) // 5)
            pieces.append((f"{path.rsplit('/', 1)[-1]}:{i}", " ".join(words[:cut]), " ".join(words[cut:])))
    if len(pieces) < args.choices:
        sys.exit(f"make_fortune_mc: only {len(pieces)} usable fortunes in {inputs}")
    rng = random.Random(args.seed)
    rng.shuffle(pieces)
    pieces = pieces[: args.examples]
    endings = [p[2] for p in pieces]
    lines = []
    for k, (source, context, ending) in enumerate(pieces):
        distractors = set()
        while len(distractors) < args.choices - 1:
            j = rng.randrange(len(endings))
            if j != k and endings[j] != ending:
                distractors.add(endings[j])
        choices = sorted(distractors) + [ending]
        rng.shuffle(choices)
        lines.append(json.dumps({"context": context, "choices": choices, "label": choices.index(ending),
                                 "source": source}, ensure_ascii=False))
    text = "\n".join(lines) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
