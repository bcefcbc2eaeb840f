#!/usr/bin/python3
"""Recomputes cairn-eval's multiple-choice log-likelihoods with an independent PyTorch GPT-2 (float64)
from the same checkpoint (model.h5 read with h5py), and checks the harness-style tokenization
(bytes tokenizer: UTF-8 bytes, end-of-text 256) of each request. Exit 1 on any mismatch > 1e-4.
usage: torch_mc.py model.h5 samples.jsonl task.jsonl
"""
import json
import math
import sys

import h5py
import torch
import torch.nn.functional as F


def load(path):
    f = h5py.File(path, "r")
    cfg = {k: int(f.attrs[k]) for k in ("layers", "hidden", "heads", "seq_len", "vocab", "vocab_real")}
    P = {k: torch.from_numpy(f["params"][k][...]).double() for k in f["params"].keys()}
    return cfg, P


def forward(cfg, P, ids):
    T, C, H = len(ids), cfg["hidden"], cfg["heads"]
    idx = torch.tensor(ids, dtype=torch.long)
    x = P["wte"][idx] + P["wpe"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(cfg["layers"]):
        p = lambda n: P[f"h.{l}.{n}"]
        h = F.layer_norm(x, (C,), p("ln_1.weight"), p("ln_1.bias"), 1e-5)
        q, k, v = (h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")).split(C, dim=1)
        q, k, v = (t.view(T, H, C // H).transpose(0, 1) for t in (q, k, v))
        att = (q @ k.transpose(1, 2)) / math.sqrt(C // H)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(0, 1).reshape(T, C)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = F.layer_norm(x, (C,), p("ln_2.weight"), p("ln_2.bias"), 1e-5)
        h = F.gelu(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh")
        x = x + h @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], 1e-5)
    logits = x @ P["wte"].T
    return logits[:, : cfg["vocab_real"]].log_softmax(dim=-1)


def encode_pair(context, continuation):
    # lm-evaluation-harness: trailing whitespace of the context moves to the continuation.
    if context == "":
        return [256], list(continuation.encode())
    n = len(context) - len(context.rstrip())
    if n:
        continuation = context[-n:] + continuation
        context = context[:-n]
    whole = list((context + continuation).encode())
    ctx = list(context.encode())
    return ctx, whole[len(ctx):]


def main():
    cfg, P = load(sys.argv[1])
    samples = [json.loads(l) for l in open(sys.argv[2])]
    docs = [json.loads(l) for l in open(sys.argv[3])]
    worst, n = 0.0, 0
    for s in samples:
        doc = docs[s["doc_id"]]
        # The harness's sample schema: filtered_resps[c] = [str(loglikelihood), str(is_greedy)].
        lls = [float(r[0]) for r in s["filtered_resps"]]
        for c, choice in enumerate(doc["choices"]):
            ctx, cont = encode_pair(doc["context"], " " + choice)
            req = s["cairn"]["requests"][c]
            if ctx + cont != req["sequence"] or len(cont) != req["continuation_tokens"]:
                sys.exit(f"doc {s['doc_id']} choice {c}: tokenization differs from cairn's")
            # Each continuation token predicted once from as many preceding tokens as fit (seq_len): the
            # harness's left truncation when the continuation fits, rolling chunks when it does not.
            seq, C = ctx + cont, cfg["seq_len"]
            ll, cur = 0.0, len(seq) - len(cont)
            while cur < len(seq):
                end = min(len(seq), cur + C)
                start = max(0, end - 1 - C)
                logp = forward(cfg, P, seq[start:end - 1])
                ll += sum(logp[j - 1 - start, seq[j]].item() for j in range(cur, end))
                cur = end
            err = abs(ll - lls[c]) / max(1.0, abs(ll))
            worst = max(worst, err)
            n += 1
        best = max(range(len(lls)), key=lambda i: (lls[i], -i))
        if (best == int(s["target"])) != bool(s["acc"]):
            sys.exit(f"doc {s['doc_id']}: acc disagrees with the log-likelihoods")
    print(f"torch parity: {n} choice log-likelihoods, max relative error {worst:.2e}")
    if worst > 1e-4:
        sys.exit("mismatch above 1e-4")


if __name__ == "__main__":
    main()
