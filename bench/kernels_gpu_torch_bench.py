#!/usr/bin/env python3
"""Benchmark (figures, not a test) for bench/kernels_gpu_bench.sh: one GPT-2 training step (zero_grad + forward +
backward + AdamW) in the machine's PyTorch on the GPU, the same model as cairn (tests/libcommon/gpt/torch_gpt.py: HF
Conv1D layout, tied lm_head, tanh GELU) but with PyTorch's fused attention (scaled_dot_product_attention), at the
largest power-of-two micro-batch that fits. Prints tokens/s, MFU (cairn's FLOP count: gpt::train_flops_per_token)
and torch.cuda.max_memory_allocated.
Usage: kernels_gpu_torch_bench.py [--mode eager|compile] [--dtype fp32|bf16] [--batch 0] [--max-batch 64]
                                  [--layers 12 --hidden 768 --heads 12 --seq 1024 --vocab 50304] [--steps 5]"""
import argparse
import math
import time

import torch
import torch.nn.functional as F


def flops_per_token(L, C, T, V):
    # the same count as cairn's gpt::train_flops_per_token
    return 6.0 * (L * 12.0 * C * C + C * V) + 12.0 * L * T * C


def make_params(L, C, T, V, dev):
    g = torch.Generator().manual_seed(1)
    p = {"wte": torch.randn(V, C, generator=g) * 0.02, "wpe": torch.randn(T, C, generator=g) * 0.02}
    for l in range(L):
        for n, s in (("ln_1.weight", (C,)), ("ln_1.bias", (C,)), ("attn.c_attn.weight", (C, 3 * C)),
                     ("attn.c_attn.bias", (3 * C,)), ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)),
                     ("ln_2.weight", (C,)), ("ln_2.bias", (C,)), ("mlp.c_fc.weight", (C, 4 * C)),
                     ("mlp.c_fc.bias", (4 * C,)), ("mlp.c_proj.weight", (4 * C, C)), ("mlp.c_proj.bias", (C,))):
            name = f"h.{l}.{n}"
            if n.endswith("bias"):
                p[name] = torch.zeros(s)
            elif n.startswith("ln_"):
                p[name] = torch.ones(s)
            else:
                std = 0.02 / math.sqrt(2 * L) if n.endswith("c_proj.weight") else 0.02
                p[name] = torch.randn(s, generator=g) * std
    p["ln_f.weight"] = torch.ones(C)
    p["ln_f.bias"] = torch.zeros(C)
    return {k: v.to(dev).requires_grad_(True) for k, v in p.items()}


def forward(p, L, NH, idx, targets):
    B, T = idx.shape
    C = p["wte"].shape[1]
    hd = C // NH
    x = p["wte"][idx] + p["wpe"][:T]
    for l in range(L):
        h = lambda n: p[f"h.{l}.{n}"]  # noqa: E731
        a = F.layer_norm(x, (C,), h("ln_1.weight"), h("ln_1.bias"), 1e-5)
        q, k, v = (a @ h("attn.c_attn.weight") + h("attn.c_attn.bias")).split(C, dim=2)
        q, k, v = (t.view(B, T, NH, hd).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, C)
        x = x + (y @ h("attn.c_proj.weight") + h("attn.c_proj.bias"))
        m = F.layer_norm(x, (C,), h("ln_2.weight"), h("ln_2.bias"), 1e-5)
        m = F.gelu(m @ h("mlp.c_fc.weight") + h("mlp.c_fc.bias"), approximate="tanh")
        x = x + (m @ h("mlp.c_proj.weight") + h("mlp.c_proj.bias"))
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    logits = x @ p["wte"].t()
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def run(a, B):
    dev = torch.device("cuda")
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    p = make_params(a.layers, a.hidden, a.seq, a.vocab, dev)
    decay = [t for t in p.values() if t.dim() == 2]
    no_decay = [t for t in p.values() if t.dim() == 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, fused=True)
    fwd = forward
    if a.mode == "compile":
        fwd = torch.compile(forward)
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(0, a.vocab, (B, a.seq), generator=g).to(dev)
    tgt = torch.randint(0, a.vocab, (B, a.seq), generator=g).to(dev)
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.dtype == "bf16")
    total = 0.0
    for s in range(-a.warmup, a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        with amp:
            loss = fwd(p, a.layers, a.heads, idx, tgt)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if s >= 0:
            total += time.perf_counter() - t0
    tok_s = B * a.seq * a.steps / total
    return tok_s, 1e3 * total / a.steps, torch.cuda.max_memory_allocated() / 2**30, loss.item()


def main():
    ap = argparse.ArgumentParser()
    for k, v in (("layers", 12), ("hidden", 768), ("heads", 12), ("seq", 1024), ("vocab", 50304), ("batch", 0),
                 ("max_batch", 64), ("steps", 5), ("warmup", 2)):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    ap.add_argument("--mode", default="eager", choices=["eager", "compile"])
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--peak-fp32", type=float, default=67.0)
    ap.add_argument("--peak-bf16", type=float, default=989.4)
    a = ap.parse_args()
    if not torch.cuda.is_available():  # the baseline cannot run here: skipped (77, as the gpu tests), with the reason
        why = "built without CUDA" if torch.version.cuda is None else f"CUDA {torch.version.cuda} sees no usable GPU"
        print(f"SKIPPED: PyTorch {torch.__version__} ({torch.__file__}): {why}")
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as cairn's cuBLAS calls
    torch.backends.cudnn.allow_tf32 = False
    # Largest power of two that fits (or the given batch), halving on out-of-memory.
    batches = [a.batch] if a.batch > 0 else [b for b in (2**i for i in range(12)) if b <= a.max_batch][::-1]
    for B in batches:
        try:
            tok_s, step_ms, mem, loss = run(a, B)
        except torch.cuda.OutOfMemoryError:
            print(f"micro-batch {B}: out of memory")
            continue
        tflops = flops_per_token(a.layers, a.hidden, a.seq, a.vocab) * tok_s / 1e12
        name = f"torch_{a.mode}_{a.dtype}"
        print(f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__}, micro-batch {B}, {a.steps} steps")
        print(f"{name}: {tok_s:9.0f} tokens/s  {tflops:6.1f} TFLOP/s  MFU {100 * tflops / a.peak_fp32:5.1f}% of fp32 "
              f"peak, {100 * tflops / a.peak_bf16:5.2f}% of bf16 peak  step {step_ms:.1f} ms  peak mem {mem:.2f} GiB  "
              f"loss {loss:.4f}")
        print(f"RESULT {name} batch={B} tokens_per_s={tok_s:.0f} mfu_fp32={tflops / a.peak_fp32:.4f} "
              f"mfu_bf16={tflops / a.peak_bf16:.4f} peak_mem_gib={mem:.2f}")
        return 0
    print("no micro-batch fits")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
