#!/usr/bin/env python3
"""A whole cairn-train run redone in PyTorch (float64) from the documented maths, not from cairn's code.

Model (tools/train/README.md): GPT-2, pre-LayerNorm (eps 1e-5), tanh GELU, learned positions, output layer tied to
the token embedding, HF Conv1D weight layout (x @ W), logits of the padded vocabulary rows never a target (masked).
Loss: mean token cross-entropy over the global batch, summed over micro-batches (gradient accumulation).
Optimizer: AdamW with decoupled weight decay on matrices and embeddings, not on norms and biases; clipping by the
global L2 norm (coefficient clip / (norm + 1e-6), at most 1). Schedule: update k (from 1) of the warmup at
lr * k / warmup, then Megatron's decay: update k at the value after k - 1 updates, min_lr after decay_steps.

The dataset must hold exactly one global batch of windows (every step sees all of them), so the result does not
depend on the data order. Writes OUT.json (loss, grad_norm, lr per step) and OUT.npz (parameters at --save steps).
--wrong names a deliberate mistake, to show the comparison notices one (the test's negative control).
"""
import argparse
import json
import math

import h5py
import numpy as np
import torch

ap = argparse.ArgumentParser()
ap.add_argument("--init", required=True, help="model.h5 with the initial weights")
ap.add_argument("--data", required=True, help="cairn dataset directory (index.json + shards)")
ap.add_argument("--out", required=True)
ap.add_argument("--steps", type=int, required=True)
ap.add_argument("--micro", type=int, required=True, help="micro-batch (sequences per forward)")
ap.add_argument("--lr", type=float, required=True)
ap.add_argument("--min-lr", type=float, required=True)
ap.add_argument("--warmup", type=int, required=True)
ap.add_argument("--decay-steps", type=int, default=0)
ap.add_argument("--weight-decay", type=float, required=True)
ap.add_argument("--beta1", type=float, default=0.9)
ap.add_argument("--beta2", type=float, default=0.95)
ap.add_argument("--eps", type=float, required=True)
ap.add_argument("--clip", type=float, required=True)
ap.add_argument("--save", default="", help="comma list of steps whose parameters are saved")
ap.add_argument("--wrong", choices=["", "decay-norms", "megatron-warmup"], default="")
a = ap.parse_args()
torch.set_num_threads(1)
dtype = torch.float64

with h5py.File(a.init, "r") as f:
    V, V_real = int(f.attrs["vocab"]), int(f.attrs["vocab_real"])
    L, C, H, T = (int(f.attrs[k]) for k in ("layers", "hidden", "heads", "seq_len"))
    P = {}
    for name in f["params"]:
        x = np.array(f["params"][name], dtype=np.float64)
        # The initial weights come from one update at lr 1e-30: it leaves ~1e-30 on the zero-initialised biases.
        x[np.abs(x) < 1e-20] = 0.0
        P[name] = torch.tensor(x, dtype=dtype, requires_grad=True)
names = sorted(P)

# Windows of T + 1 tokens, T apart, never across a shard (docs/shard-format.md).
index = json.load(open(a.data + "/index.json"))
windows = []
for shard in index["shards"]:
    with h5py.File(a.data + "/" + shard["file"], "r") as f:
        tokens = np.array(f["tokens"], dtype=np.int64)
    windows += [tokens[w * T : w * T + T + 1] for w in range((len(tokens) - 1) // T)]
W = torch.tensor(np.stack(windows))
X, Y = W[:, :-1], W[:, 1:]
batch = len(W)

causal = torch.ones(T, T, dtype=torch.bool).triu(1)


def layer_norm(x, prefix):
    return torch.nn.functional.layer_norm(x, (C,), P[prefix + ".weight"], P[prefix + ".bias"], 1e-5)


def gelu(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def loss_sum(x, y):
    B = x.shape[0]
    h = P["wte"][x] + P["wpe"][:T][None]
    for i in range(L):
        p = f"h.{i}."
        qkv = layer_norm(h, p + "ln_1") @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=-1))
        s = (q @ k.transpose(-1, -2) / math.sqrt(C // H)).masked_fill(causal, float("-inf")).softmax(-1)
        o = (s @ v).transpose(1, 2).reshape(B, T, C)
        h = h + o @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
        u = gelu(layer_norm(h, p + "ln_2") @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"])
        h = h + u @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]
    logits = layer_norm(h, "ln_f") @ P["wte"].t()
    logits[..., V_real:] = float("-inf")
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1), reduction="sum")


def lr_at(k):
    decay = a.decay_steps or a.steps
    warmup = min(a.warmup, decay)
    if a.wrong == "megatron-warmup" and k <= warmup:
        return a.lr * (k - 1) / warmup
    if k <= warmup:
        return a.lr * k / warmup
    done = k - 1  # Megatron: the value after k - 1 updates
    if done >= decay:
        return a.min_lr
    r = (done - warmup) / (decay - warmup)
    return a.min_lr + 0.5 * (math.cos(math.pi * r) + 1) * (a.lr - a.min_lr)


def decays(name):
    return a.wrong == "decay-norms" or P[name].dim() >= 2


m = {n: torch.zeros_like(P[n]) for n in names}
v2 = {n: torch.zeros_like(P[n]) for n in names}
save = {int(s) for s in a.save.split(",") if s}
records, snapshots = [], {}
for k in range(1, a.steps + 1):
    for n in names:
        P[n].grad = None
    loss = 0.0
    for first in range(0, batch, a.micro):
        part = loss_sum(X[first : first + a.micro], Y[first : first + a.micro]) / (batch * T)
        part.backward()
        loss += part.item()
    norm = math.sqrt(sum(float((P[n].grad**2).sum()) for n in names))
    coef = min(1.0, a.clip / (norm + 1e-6))
    lr = lr_at(k)
    with torch.no_grad():
        for n in names:
            g = P[n].grad * coef
            m[n].mul_(a.beta1).add_(g, alpha=1 - a.beta1)
            v2[n].mul_(a.beta2).addcmul_(g, g, value=1 - a.beta2)
            update = (m[n] / (1 - a.beta1**k)) / ((v2[n] / (1 - a.beta2**k)).sqrt() + a.eps)
            if decays(n):
                P[n].mul_(1 - lr * a.weight_decay)
            P[n].add_(update, alpha=-lr)
    records.append({"step": k, "loss": loss, "grad_norm": norm, "lr": lr})
    if k in save:
        snapshots.update({f"{k}/{n}": P[n].detach().numpy().copy() for n in names})
np.savez(a.out + ".npz", **snapshots)
json.dump(records, open(a.out + ".json", "w"))
