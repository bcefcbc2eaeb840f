#!/usr/bin/python3
"""Benchmark (figures, not a test): tokens/s of one GPT training step (zero_grad + forward + backward + AdamW)
in eager PyTorch, the same model as kernels_gpt_bench (tests/libcommon/gpt/torch_gpt.py), same batch and thread count.
Usage: kernels_torch_bench.py [--layers L] [--hidden C] [--heads H] [--seq T] [--batch B] [--vocab V] [--steps S]"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "libcommon", "gpt"))
from torch_gpt import forward  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    for k, v in (("layers", 4), ("hidden", 256), ("heads", 4), ("seq", 256), ("batch", 4), ("vocab", 8192),
                 ("steps", 5), ("warmup", 1)):
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    a = ap.parse_args()
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    threads = int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads()))
    torch.set_num_threads(threads)
    C, L = a.hidden, a.layers
    g = torch.Generator().manual_seed(1)
    shapes = {"wte": (a.vocab, C), "wpe": (a.seq, C)}
    for l in range(L):
        for n, s in (("ln_1.weight", (C,)), ("ln_1.bias", (C,)), ("attn.c_attn.weight", (C, 3 * C)),
                     ("attn.c_attn.bias", (3 * C,)), ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)),
                     ("ln_2.weight", (C,)), ("ln_2.bias", (C,)), ("mlp.c_fc.weight", (C, 4 * C)),
                     ("mlp.c_fc.bias", (4 * C,)), ("mlp.c_proj.weight", (4 * C, C)), ("mlp.c_proj.bias", (C,))):
            shapes[f"h.{l}.{n}"] = s
    shapes["ln_f.weight"] = (C,)
    shapes["ln_f.bias"] = (C,)
    p = {}
    for n, s in shapes.items():
        t = torch.ones(s) if (".ln_" in n or n.startswith("ln_f")) and n.endswith("weight") else \
            torch.zeros(s) if n.endswith("bias") else torch.randn(s, generator=g) * 0.02
        p[n] = t.to(dev).requires_grad_(True)
    decay = [t for n, t in p.items() if t.dim() == 2]
    no_decay = [t for n, t in p.items() if t.dim() == 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4)
    cfg = {"hidden": C, "heads": a.heads, "layers": L, "vocab_real": a.vocab}
    idx = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(dev)
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(dev)
    tf = tb = to = 0.0
    for s in range(-a.warmup, a.steps):
        if s == 0:
            tf = tb = to = 0.0
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        _, loss = forward(p, cfg, idx, tgt)
        sync()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        opt.step()
        sync()
        t3 = time.perf_counter()
        tf, tb, to = tf + t1 - t0, tb + t2 - t1, to + t3 - t2
    total = tf + tb + to
    tokens = a.batch * a.seq * a.steps
    print(f"GPT L={L} C={C} H={a.heads} T={a.seq} V={a.vocab}, batch {a.batch}, {threads} threads, {a.steps} steps, "
          f"device {dev}")
    print(f"torch    {tokens / total:8.0f} tokens/s  step {1e3 * total / a.steps:7.1f} ms (fwd {1e3 * tf / a.steps:6.1f} "
          f"bwd {1e3 * tb / a.steps:6.1f} adamw {1e3 * to / a.steps:5.1f})  loss {loss.item():.4f}  "
          f"(PyTorch {torch.__version__})")


if __name__ == "__main__":
    main()
