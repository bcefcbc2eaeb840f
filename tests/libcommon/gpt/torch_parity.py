#!/usr/bin/python3
"""Rebuilds the GPT written by gpt_parity_dump in PyTorch and compares logits, loss, every gradient and
10 AdamW steps. Tolerances (fp32): logits and each gradient tensor max|cairn - torch| / max|torch| <= 1e-4;
loss relative error <= 1e-5; AdamW losses relative error <= 1e-5 per step; wte's padding rows get exactly
zero gradient. Exit 1 on any failure."""
import sys

import h5py
import numpy as np
import torch

from torch_gpt import forward

TOL_TENSOR = 1e-4
TOL_LOSS = 1e-5
TOL_ADAMW = 1e-5


def rel_err(ours, ref):
    ref = np.asarray(ref, dtype=np.float64)
    ours = np.asarray(ours, dtype=np.float64)
    scale = np.abs(ref).max()
    diff = np.abs(ours - ref).max()
    if scale == 0.0:
        return diff  # both should be exactly zero
    return diff / scale


def main(path):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    f = h5py.File(path, "r")
    cfg = {k: int(f.attrs[k]) for k in ("layers", "hidden", "heads", "seq_len", "vocab", "vocab_real", "B", "T")}
    backend = f.attrs["backend"]
    backend = backend.decode() if isinstance(backend, bytes) else str(backend)
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in f["tensor_order"][()]]
    init = {n: torch.tensor(f["params"][n][()], dtype=torch.float32) for n in names}
    idx = torch.tensor(f["inputs"][()], dtype=torch.long)
    targets = torch.tensor(f["targets"][()], dtype=torch.long)
    failures = []

    def check(what, err, tol):
        status = "ok" if err <= tol else "FAIL"
        print(f"  {what:40s} {err:.3e} (tol {tol:.0e}) {status}")
        if not err <= tol:
            failures.append(what)

    print(f"[{backend}] {path}: {cfg}")
    p = {n: t.clone().requires_grad_(True) for n, t in init.items()}
    logits, loss = forward(p, cfg, idx, targets)
    loss.backward()
    check("logits", rel_err(f["logits"][()], logits.detach().numpy()), TOL_TENSOR)
    check("loss", abs(float(f.attrs["loss"]) - loss.item()) / abs(loss.item()), TOL_LOSS)
    worst = 0.0
    for n in names:
        err = rel_err(f["grads"][n][()], p[n].grad.numpy())
        worst = max(worst, err)
        check("grad " + n, err, TOL_TENSOR)
    print(f"  worst gradient error {worst:.3e}")
    pad = f["grads"]["wte"][()][cfg["vocab_real"]:]
    check("wte padding rows |grad| (must be 0)", float(np.abs(pad).max()), 0.0)

    # AdamW: decay matmul weights and embeddings, not norms and biases (cairn's TensorInfo.weight_decay)
    p = {n: t.clone().requires_grad_(True) for n, t in init.items()}
    decay = [p[n] for n in names if not (n.endswith(".bias") or ".ln_" in n or n.startswith("ln_f"))]
    no_decay = [p[n] for n in names if n.endswith(".bias") or ".ln_" in n or n.startswith("ln_f")]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": float(f.attrs["weight_decay"])}, {"params": no_decay, "weight_decay": 0.0}],
        lr=float(f.attrs["lr"]), betas=(float(f.attrs["beta1"]), float(f.attrs["beta2"])), eps=float(f.attrs["eps"]))
    ours = f["adamw_losses"][()]
    torch_losses = []
    for step in range(len(ours)):
        opt.zero_grad()
        _, loss = forward(p, cfg, idx, targets)
        torch_losses.append(loss.item())
        if step + 1 < len(ours):
            loss.backward()
            opt.step()
    for step, (a, b) in enumerate(zip(ours, torch_losses)):
        check(f"adamw loss after {step} steps ({b:.6f})", abs(a - b) / abs(b), TOL_ADAMW)
    if not torch_losses[-1] < torch_losses[0] - 0.1:
        failures.append("adamw did not reduce the loss")
    if failures:
        print(f"[{backend}] {len(failures)} FAILED: {', '.join(failures)}")
        return 1
    print(f"[{backend}] parity with PyTorch {torch.__version__}: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
