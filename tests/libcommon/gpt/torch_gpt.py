"""GPT-2 in PyTorch as a function of a dict of tensors named and shaped like cairn's flat buffer (HF names,
Conv1D weights [in, out], tied lm_head, padded vocabulary with masked columns): the reference for the
parity test and the benchmark."""
import math

import torch
import torch.nn.functional as F


def forward(p, cfg, idx, targets):
    B, T = idx.shape
    C, NH, L = cfg["hidden"], cfg["heads"], cfg["layers"]
    hd = C // NH
    x = p["wte"][idx] + p["wpe"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=idx.device))
    for l in range(L):
        h = lambda n: p[f"h.{l}.{n}"]
        a = F.layer_norm(x, (C,), h("ln_1.weight"), h("ln_1.bias"), 1e-5)
        qkv = a @ h("attn.c_attn.weight") + h("attn.c_attn.bias")
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, NH, hd).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + (y @ h("attn.c_proj.weight") + h("attn.c_proj.bias"))
        m = F.layer_norm(x, (C,), h("ln_2.weight"), h("ln_2.bias"), 1e-5)
        m = F.gelu(m @ h("mlp.c_fc.weight") + h("mlp.c_fc.bias"), approximate="tanh")
        x = x + (m @ h("mlp.c_proj.weight") + h("mlp.c_proj.bias"))
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    logits = x @ p["wte"].t()
    V = cfg["vocab_real"]
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1), ignore_index=-1)
    return logits, loss
