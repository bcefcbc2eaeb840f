#!/usr/bin/env python3
"""Predicted vs published training throughput: cairn-plan's cost model against published large runs.

Every row is one published measurement (citation in `src`), modelled with its framework's mechanisms
(flash attention or not and which kernel, gradient reduction overlapped or after the flush, FSDP = ZeRO-3, the
selective-recompute policy, the power cap, eager or fused elementwise kernels). Rows alternate between a fit
half and a held-out half within each source. `--fit` searches the one global constant per device on the fit
half only (the fraction of its measured best-shape GEMM rate that training sustains) and prints it; the report
prints mean and max error on both halves with the constants shipped in configs/clusters/.

  bench/plan_accuracy.py [--bin build/bin] [--fit] [--json out.json]
"""
import argparse
import json
import math
import multiprocessing
import os
import subprocess
import sys
import tempfile

A100 = "configs/clusters/dgx-a100-80gb.toml"
H100 = "configs/clusters/dgx-h100.toml"
H200 = "configs/clusters/h200.toml"
# Best-shape bf16 GEMM efficiency measured per device (ml-engineering "Maximum Achievable Matmul FLOPS":
# A100 SXM 271.2/312, H100 SXM 794.5/989); gemm_max_efficiency = this x the fitted sustain factor.
MAMF = {A100: 0.869, H100: 0.803}
# Best-shape FP8 GEMM efficiency on H100 SXM (E4M3 inputs, bf16 output): DeepGEMM reports up to 1550 TFLOP/s on
# H800 SXM (the H100's compute) and a cuBLASLt 8192^3 E4M3 run measures 1600-1630 of 1979: about 0.80. FP8 rows fit
# their own sustain factor (cluster.fp8_gemm_max_efficiency = this x it) on their fit half.
MAMF_FP8 = {H100: 0.80}
STACKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "stacks")

NARAYANAN = "Narayanan et al. 2021 (SC21) Table 1: Megatron GPT, s=2048, V=51200, DGX A100 80GB, full recompute"
KORTHIKANTI = ("Korthikanti et al. 2022 (arXiv 2205.05198) Tables 3 and 5: iteration time, A100 80GB, s=2048, "
               "V=51200, micro-batch 1")
NARAYANAN_T2 = ("Narayanan et al. 2021 (SC21) Table 2: DeepSpeed ZeRO-3 without model parallelism vs PTD-P (Megatron), "
                "GPT 175B and 530B, s=2048, V=51200, Selene DGX A100 80GB with 8 x 200 Gb/s HDR per node, hardware "
                "TFLOP/s with full recompute, fixed global batch as the GPUs double")
BLOOM = "BigScience 2022, BLOOM-176B model card / Megatron-DeepSpeed: 384 A100 80GB, ~150 TFLOP/s per GPU"
TITAN_A100 = ("pytorch/torchtitan docs/performance.md: FSDP2 on 64 A100 80GB, local batch as given (Llama 3 rows: "
              "commit 5f5911537, 2024-12-03; Llama 2 rows: commit 613bfd0cf, 2024-04-16)")
TITAN_H100 = ("pytorch/torchtitan docs/performance.md Tables 1 and 3 (commit d4c86e375, torch 2024-12-23): FSDP, "
              "eager, bf16, H100 96GB HBM2e (2.4 TB/s) at the default 500 W power limit, 400 Gb/s per GPU; "
              "405B row: docs/performance.md at 5f5911537 (2024-12-03), 128 H100 95GB lower-TDP, FSDP16 TP8, no Float8")
TITAN_H100_COMPILE = ("pytorch/torchtitan docs/performance.md Tables 1 and 3 (commit d4c86e375, torch 2024-12-23): "
                      "FSDP + torch.compile, and + Float8 (torchao tensorwise dynamic scaling of every nn.Linear but "
                      "the output layer; bf16 all-gathers), Llama 3.1 8B on 8 and 128 H100 96GB at 500 W")
TITAN_H100_ND = ("pytorch/torchtitan docs/performance.md Tables 2, 4, 5 and 6 (commit d4c86e375; torch 2024-12-23, "
                 "torchtitan 9dec370): Llama 3.1 8B / 70B / 405B with FSDP2 + CP, TP (+ AsyncTP) and PP, torch.compile "
                 "+ Float8, full activation checkpointing, H100 96GB at 500 W, 8-512 GPUs; held out whole (added "
                 "after the constants were fitted)")
TITAN_ASYNCTP_2506 = ("pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (torch 38410cf9, "
                      "2025-06-14; torchtitan 820504e): Llama 3.1 8B FSDP8 x TP8 on 64 H100 (per-op SAC, local batch "
                      "12) and 70B FSDP32 x TP8 on 256 H100 (full AC, local batch 16), torch.compile, vanilla TP and "
                      "async TP, bf16 and Float8 tensorwise (its rowwise rows are not priced: another scaling), Grand "
                      "Teton H100 96GB HBM2e at 500 W, 400 Gb/s per GPU; held out whole (added after the fit)")
TITAN_H200 = ("pytorch/torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (Trainy on WhiteFiber, June "
              "2025; torch 2.8.0a0 NGC 25.05, torchtitan e7c0cae): Llama 3.1 8B, FSDP over 4 and 8 hosts of 8 H200 "
              "(NVLink, 400 Gb/s per GPU), torch.compile + Float8 tensorwise with FSDP float8 all-gathers, local "
              "batch 2, seq 8192, selective op AC (llama3_8b.toml's default); held out whole (added after the fit)")
MOSAIC = ("mosaicml/llm-foundry scripts/train/benchmarking/README.md: MPT FSDP FULL_SHARD, bf16, flash "
          "attention; A100 80GB with 1600 Gb/s RoCE per node, H100 80GB")
NEMO_2407 = ("NVIDIA/NeMo docs/source/performance/performance_summary.md (NeMo 24.07 container, commit 070a0bb16): "
             "pre-training at FP8 (Transformer Engine, delayed scaling), DGX-H100, Megatron-Core with sequence "
             "parallelism and TP communication overlap where TP > 1, distributed optimizer")
BRIDGE_2511 = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md, 25.11 NeMo container, DGX-H100, FP8-CS "
               "(current scaling), dense models; FSDP = 1 is Megatron-FSDP")
NEMO_LONG_2403 = ("NVIDIA/NeMo docs/source/performance/performance_long_sequence.md (commit 9421f21a), NeMo 24.03.01 "
                  "container, DGX-H100: Llama 2 7B at FP8, the with-CP configurations from 4k to 1M tokens (4 to 1024 "
                  "GPUs, 4M tokens per step), TFLOPS/GPU as Megatron counts model FLOPs (full attention, as the same "
                  "folder's performance_summary.md); recompute not stated; held out whole (added after the fit)")
MCORE_08 = ("NVIDIA/Megatron-LM README.md, images/model_table.png (commit f2e5db402c, 2024-07-15, 'New scaling figures "
            "on H100 GPUs'): Megatron-Core r0.8.0 weak scaling, GPT with V = 131072, s = 4096, H100 bf16, "
            "--overlap-grad-reduce, --overlap-param-gather, --tp-comm-overlap; per-GPU model TFLOP/s (Megatron's "
            "num_floating_point_operations: full attention counted)")
NEMOTRON4 = ("NVIDIA 2024, Nemotron-4 340B Technical Report (arXiv 2406.11704) Table 2: iteration time over the "
             "batch-size ramp on DGX H100 (8 x H100 80GB SXM5, 8 x 400 Gb/s InfiniBand per node), bf16, TP8 PP12 "
             "interleaved; virtual stages (8) and micro-batch (1) as NeMo's nemotron4_340b pre-training recipe; "
             "held out whole (added after the constants were fitted)")
MCORE_STRONG = ("NVIDIA/Megatron-LM README.md, 'Strong Scaling Results': GPT-3 175B with V = 131072 (the weak-scaling "
                "table's 177B) strong-scaled from 96 to 4608 H100 at a batch of 1152 sequences, MFU 47 % -> 42 % "
                "(Megatron's model FLOPs); TP8 x PP6 as that table's 177B; held out (added after the fit)")
LLAMA3 = ("Llama Team 2024, The Llama 3 Herd of Models, Table 4: 405B on H100 80GB 700 W, 400 Gb/s RoCE, "
          "16M tokens per batch, BF16 model TFLOP/s per GPU; the paper does not give its FLOP count: compared "
          "with causal attention counted as executed (half the s^2 products; at 8k the conventions differ by 4 %, "
          "at 128k full counting would put the CP run's hardware utilisation at 27 % against 41 % at 8k)")

# torchtitan runs Llama eagerly (no fusion, fp32 upcasts): per token and layer its forward elementwise kernels move
# 2 RMSNorms of 36h bytes (x.float() 2h->4h, pow 4h->4h, mean 4h, x*rsqrt 4h->4h, type_as 4h->2h, *weight 2h->2h),
# RoPE on q, k in complex fp32 20(h+kvd) (float 2->4, complex mul 4->4, type_as 4->2), silu and mul 10f (2f->2f,
# 4f->2f) and two residual adds 12h, where the fused kernels the model counts (memory_bound_factor 1) move
# 20h + 6f + 4(h+kvd): its memory_bound_factor is the ratio (3.1 for Llama 3 8B and 70B, 3.4 for Llama 2 13B).
def titan_eager_factor(model):
    h, f = model["hidden"], model["ffn_hidden"]
    kvd = model["kv_heads"] * h // model["heads"]
    return (2 * 36 * h + 20 * (h + kvd) + 10 * f + 12 * h) / (20 * h + 6 * f + 4 * (h + kvd))




def gpt(l, h, a, V=51200, s=2048):
    return {"architecture": "gpt", "layers": l, "hidden": h, "heads": a, "kv_heads": a, "ffn_hidden": 4 * h,
            "seq_len": s, "vocab": V, "tied_embeddings": "true"}


def llama(l, h, a, kv, f, V, s, tied=False):
    return {"architecture": "llama", "layers": l, "hidden": h, "heads": a, "kv_heads": kv, "ffn_hidden": f,
            "seq_len": s, "vocab": V, "tied_embeddings": "true" if tied else "false"}


MPT = {"760m": (24, 1536, 12), "1b": (24, 2048, 16), "3b": (32, 2560, 20), "7b": (32, 4096, 32),
       "13b": (40, 5120, 40), "30b": (48, 7168, 56), "70b": (80, 8192, 64)}


def rows():
    out = []

    def add(src, name, cluster, gpus, model, batch, plan, metric, published, sets=(), preset=None, fp8=False,
            holdout=False):
        # preset: the stack that ran it, configs/stacks/<preset>.toml (None: the cost model's defaults, Megatron-Core);
        # sets: what else the row states (hardware, precision, kernels the preset leaves open);
        # holdout: never in the fit half (a source added after the constants were fitted)
        out.append({"src": src, "name": name, "cluster": cluster, "gpus": gpus, "model": model, "batch": batch,
                    "plan": plan, "metric": metric, "published": published, "sets": list(sets), "preset": preset,
                    "fp8": fp8, "holdout": holdout})

    # Megatron 2021 reduced gradients after the pipeline flush (no overlap); hardware TFLOP/s with recompute.
    for name, l, h, a, g, tp, pp, B, pub in [
            ("1.7B", 24, 2304, 24, 32, 1, 1, 512, 137), ("3.6B", 30, 3072, 32, 64, 2, 1, 512, 138),
            ("7.5B", 36, 4096, 32, 128, 4, 1, 512, 142), ("18B", 40, 6144, 48, 256, 8, 1, 1024, 135),
            ("39B", 48, 8192, 64, 512, 8, 2, 1536, 138), ("76B", 60, 10240, 80, 1024, 8, 4, 1792, 140),
            ("145B", 80, 12288, 96, 1536, 8, 8, 2304, 148), ("310B", 96, 16384, 128, 1920, 8, 16, 2160, 155),
            ("530B", 105, 20480, 128, 2520, 8, 35, 2520, 163), ("1T", 128, 25600, 160, 3072, 8, 64, 3072, 163)]:
        add(NARAYANAN, f"GPT {name}", A100, g, gpt(l, h, a), B,
            f"tp={tp},pp={pp},v=1,zero=0,recompute=full,sp=off,cp=1", "hw_tflops", pub, preset="megatron-lm-2021")
    # Table 2: the same global batch on 2x and 4x the GPUs. ZeRO-3 is DeepSpeed stage 3 with Megatron's GPT
    # (its fused kernels), gradients reduced beside the backward (overlap_comm); PTD-P as the Table 1 rows.
    for name, l, h, a, B, g, mb, pub in [
            ("175B", 96, 12288, 96, 1536, 384, 4, 144), ("175B", 96, 12288, 96, 1536, 768, 2, 88),
            ("175B", 96, 12288, 96, 1536, 1536, 1, 44), ("530B", 105, 20480, 128, 2560, 640, 4, 138),
            ("530B", 105, 20480, 128, 2240, 1120, 2, 98), ("530B", 105, 20480, 128, 2240, 2240, 1, 48)]:
        add(NARAYANAN_T2, f"GPT {name} ZeRO-3 {g} GPUs", A100, g, gpt(l, h, a), B,
            f"tp=1,pp=1,v=1,mb={mb},zero=3,recompute=full,sp=off,cp=1", "hw_tflops", pub, preset="deepspeed-zero3")
    for name, l, h, a, tp, pp, B, g, pub in [
            ("175B", 96, 12288, 96, 8, 12, 1536, 384, 153), ("175B", 96, 12288, 96, 8, 12, 1536, 768, 149),
            ("175B", 96, 12288, 96, 8, 12, 1536, 1536, 141), ("530B", 105, 20480, 128, 8, 35, 2240, 560, 171),
            ("530B", 105, 20480, 128, 8, 35, 2240, 1120, 167), ("530B", 105, 20480, 128, 8, 35, 2240, 2240, 159)]:
        add(NARAYANAN_T2, f"GPT {name} PTD-P {g} GPUs", A100, g, gpt(l, h, a), B,
            f"tp={tp},pp={pp},v=1,mb=1,zero=0,recompute=full,sp=off,cp=1", "hw_tflops", pub, preset="megatron-lm-2021")
    add(BLOOM, "BLOOM-176B", A100, 384, gpt(70, 14336, 112, V=250880), 2048,
        "tp=4,pp=12,v=1,mb=2,zero=1,recompute=full,sp=off,cp=1", "hw_tflops", 150,
        ["cluster.inter_bw_gbps=6.25"], "megatron-deepspeed")
    # Korthikanti 2022: dp = 1 everywhere; full recompute without SP vs selective recompute + SP.
    for name, l, h, a, g, tp, pp, B, full_s, sel_s in [
            ("22B", 48, 6144, 64, 8, 8, 1, 4, 1.42, 1.10), ("175B", 96, 12288, 96, 64, 8, 8, 64, 18.13, 13.75),
            ("530B", 105, 20480, 128, 280, 8, 35, 280, 49.05, 37.83),
            ("1T", 128, 25600, 160, 512, 8, 64, 512, 94.42, 71.49)]:
        add(KORTHIKANTI, f"GPT {name} full recompute", A100, g, gpt(l, h, a), B,
            f"tp={tp},pp={pp},v=1,mb=1,zero=0,recompute=full,sp=off,cp=1,tp_overlap=off", "step_s", full_s)
        add(KORTHIKANTI, f"GPT {name} selective + SP", A100, g, gpt(l, h, a), B,
            f"tp={tp},pp={pp},v=1,mb=1,zero=0,recompute=selective,sp=on,cp=1,tp_overlap=off", "step_s", sel_s)
    # torchtitan FSDP2 (ZeRO-3) on A100: configs/stacks/torchtitan.toml says what it runs and why (SDPA's
    # FlashAttention-2, fp32 gradient reduction, eager AdamW and elementwise kernels, op-level selective
    # checkpointing, async TP on the forward only, all-gather CP); predict() gives each eager row its model's
    # elementwise factor (titan_eager_factor).
    fa = ["plan.flash_attention=true"]
    l3_8b = llama(32, 4096, 32, 8, 14336, 128256, 8192)
    l3_70b = llama(80, 8192, 64, 8, 28672, 128256, 8192)
    l2_13b = llama(40, 5120, 40, 40, 13824, 32000, 4096)
    l2_70b = llama(80, 8192, 64, 8, 28672, 32000, 4096)
    add(TITAN_A100, "Llama3 8B FSDP64 selective op", A100, 64, l3_8b, 64,
        "tp=1,pp=1,mb=1,zero=3,recompute=selective,cp=1", "tokens_per_gpu", 2973, preset="torchtitan")
    add(TITAN_A100, "Llama3 70B FSDP64 full", A100, 64, l3_70b, 64,
        "tp=1,pp=1,mb=1,zero=3,recompute=full,cp=1", "tokens_per_gpu", 331, preset="torchtitan")
    add(TITAN_A100, "Llama2 13B FSDP64 none", A100, 64, l2_13b, 128,
        "tp=1,pp=1,mb=2,zero=3,recompute=none,cp=1", "tokens_per_gpu", 2162, preset="torchtitan")
    add(TITAN_A100, "Llama2 70B FSDP64 full", A100, 64, l2_70b, 128,
        "tp=1,pp=1,mb=2,zero=3,recompute=full,cp=1", "tokens_per_gpu", 353, preset="torchtitan")
    add(TITAN_A100, "Llama2 13B FSDP64 selective op", A100, 64, l2_13b, 128,
        "tp=1,pp=1,mb=2,zero=3,recompute=selective,cp=1", "tokens_per_gpu", 1904, preset="torchtitan")
    add(TITAN_A100, "Llama2 70B FSDP64 mb1 selective op", A100, 64, l2_70b, 64,
        "tp=1,pp=1,mb=1,zero=3,recompute=selective,cp=1", "tokens_per_gpu", 355, preset="torchtitan")
    # torchtitan on H100 96GB HBM2e at their default 500 W power limit (of 700 W: cluster.power_limit_w) with
    # PyTorch SDPA's FlashAttention-2 (the preset's attention_kernel = flash2: the cluster's flash2_efficiency, 0.33 on
    # the H100 from Shah et al. 2024). Op-level selective checkpointing (alternate_mm) stores less than Korthikanti's
    # selective recompute; memory is not what these rows check, so it is lifted.
    h100_96 = ["cluster.hbm_gbps=2400", "cluster.hbm_gib=120", "cluster.power_limit_w=500"]
    l31_8b = llama(32, 4096, 32, 8, 14336, 128256, 8192)
    add(TITAN_H100, "Llama3.1 8B FSDP8 selective op", H100, 8, l31_8b, 16,
        "tp=1,pp=1,mb=2,zero=3,recompute=selective,cp=1", "tokens_per_gpu", 5762, h100_96, "torchtitan")
    add(TITAN_H100, "Llama3.1 8B FSDP128 selective op", H100, 128, l31_8b, 256,
        "tp=1,pp=1,mb=2,zero=3,recompute=selective,cp=1", "tokens_per_gpu", 5605, h100_96, "torchtitan")
    # torch.compile fuses the eager elementwise chains (norms, RoPE, SwiGLU) into single kernels: the fused byte
    # count (configs/stacks/torchtitan-compile.toml); the optimizer stays torch.optim's foreach AdamW. Float8's
    # tensorwise dynamic scaling computes each tensor's amax before its cast: current scaling.
    for g, B, pub_c, pub_f in [(8, 16, 6667, 8532), (128, 256, 6514, 8380)]:
        add(TITAN_H100_COMPILE, f"Llama3.1 8B FSDP{g} compile", H100, g, l31_8b, B,
            "tp=1,pp=1,mb=2,zero=3,recompute=selective,cp=1", "tokens_per_gpu", pub_c, h100_96, "torchtitan-compile")
        add(TITAN_H100_COMPILE, f"Llama3.1 8B FSDP{g} compile Float8", H100, g, l31_8b, B,
            "tp=1,pp=1,mb=2,zero=3,recompute=selective,cp=1", "tokens_per_gpu", pub_f,
            h100_96 + ["plan.precision=fp8", "plan.fp8_scaling=current"], "torchtitan-compile", fp8=True)
    # The same stack in 2-4 dimensions (torch.compile + Float8, full checkpointing). Context parallelism is PyTorch's
    # (all-gather rotation, torchtitan's default). PP is PyTorch pipelining: FSDP2 stages gathered once per step and
    # reduced after the last backward (plan.zero_sync = step), and as many micro-batches as stages (torchtitan's
    # default), so micro-batch = local batch / pp. Without PP torchtitan does not accumulate: one micro-batch.
    f8 = h100_96 + ["plan.precision=fp8", "plan.fp8_scaling=current"]
    l31_70b = llama(80, 8192, 64, 8, 28672, 128256, 8192)
    l31_405b = llama(126, 16384, 128, 8, 53248, 128256, 8192)
    for dp, cp, s, pub in [(8, 1, 32768, 3890), (4, 2, 65536, 2540), (2, 4, 131072, 1071), (1, 8, 262144, 548)]:
        add(TITAN_H100_ND, f"Llama3.1 8B FSDP{dp} CP{cp} {s // 1024}k", H100, 8, dict(l31_8b, seq_len=s), dp,
            f"tp=1,pp=1,cp={cp},mb=1,zero=3,recompute=full", "tokens_per_gpu", pub, f8,
            "torchtitan-compile", fp8=True, holdout=True)
    for ov, pub in [("off", 829), ("on", 876)]:
        add(TITAN_H100_ND, f"Llama3.1 70B FSDP32 TP8{' AsyncTP' if ov == 'on' else ''}", H100, 256, l31_70b, 512,
            f"tp=8,pp=1,cp=1,mb=16,zero=3,recompute=full,sp=on,tp_overlap={ov}", "tokens_per_gpu", pub, f8,
            "torchtitan-compile", fp8=True, holdout=True)
    for v, pub in [(1, 100), (2, 128)]:
        add(TITAN_H100_ND, f"Llama3.1 405B FSDP8 TP8 PP8 {'1F1B' if v == 1 else 'interleaved'}", H100, 512, l31_405b,
            256, f"tp=8,pp=8,v={v},cp=1,mb=4,zero=3,recompute=full,sp=on,tp_overlap=on", "tokens_per_gpu", pub,
            f8 + ["plan.zero_sync=step"], "torchtitan-compile", fp8=True, holdout=True)
    for dp, cp, s, pub in [(8, 1, 32768, 76), (4, 2, 65536, 47), (2, 4, 131072, 31), (1, 8, 262144, 16)]:
        add(TITAN_H100_ND, f"Llama3.1 405B TP8 PP8 CP{cp} {s // 1024}k", H100, 512, dict(l31_405b, seq_len=s), 8 * dp,
            f"tp=8,pp=8,v=1,cp={cp},mb=1,zero=3,recompute=full,sp=on,tp_overlap=on", "tokens_per_gpu", pub,
            f8 + ["plan.zero_sync=step"], "torchtitan-compile", fp8=True, holdout=True)
    # The same stack half a year later (held out): async TP against vanilla TP on the 8B and 70B, and the 8B on H200
    # (the first H200 rows: the cluster file's constants are the H100 fit's, scaled by GH200's best GEMM rate), whose
    # FSDP gathers the Float8 weights in FP8 (enable_fsdp_float8_all_gather: plan.fp8_param_gather).
    for prec, extra, ov_pub in [("bf16", [], [(4378, 4809.4), (597.3, 652.4)]),
                                ("Float8", f8, [(5078.1, 5570.1), (809.8, 942.4)])]:
        for (name, model, g, B, ac, mb), pubs in zip([("8B", l31_8b, 64, 96, "selective", 12),
                                                      ("70B", l31_70b, 256, 512, "full", 16)], ov_pub):
            for ov, pub in zip(("off", "on"), pubs):
                add(TITAN_ASYNCTP_2506, f"Llama3.1 {name} FSDP{g // 8} TP8 {prec}{' AsyncTP' if ov == 'on' else ''}",
                    H100, g, model, B, f"tp=8,pp=1,cp=1,mb={mb},zero=3,recompute={ac},sp=on,tp_overlap={ov}",
                    "tokens_per_gpu", pub, (h100_96 if prec == "bf16" else []) + extra, "torchtitan-compile",
                    fp8=prec == "Float8", holdout=True)
    for g, pub in [(32, 10938), (64, 10753)]:
        add(TITAN_H200, f"Llama3.1 8B FSDP{g} H200 Float8", H200, g, l31_8b, 2 * g,
            "tp=1,pp=1,cp=1,mb=2,zero=3,recompute=selective", "tokens_per_gpu", pub,
            ["plan.precision=fp8", "plan.fp8_scaling=current", "plan.fp8_param_gather=true"], "torchtitan-compile",
            fp8=True, holdout=True)
    add(TITAN_H100, "Llama3.1 405B FSDP16 TP8 full", H100, 128, l31_405b, 32,
        "tp=8,pp=1,mb=2,zero=3,recompute=full,sp=on,cp=1,tp_overlap=off", "tokens_per_gpu", 109, h100_96, "torchtitan")
    # MosaicML MPT (GPT-style, V = 50368, tied), FSDP FULL_SHARD, activation checkpointing = full recompute.
    # The benchmark ran llm-foundry's default attn_impl = triton (submit_benchmarks.py at b2a43a147): the 2023
    # Triton FlashAttention (flash_attn_triton.py, plan.attention_kernel = triton2023), which Dao 2023 section 4.1
    # measures 1.3-1.5x slower than FlashAttention-2 forward and 2x slower backward: 0.54 of FA2's rate (the cost
    # model's attention_efficiency(); A100 0.6 -> 0.32, H100 0.33 -> 0.18).
    # Composer's FSDP mixed precision DEFAULT reduces gradients in fp32 (grad_bytes 4); PURE (the A100 70B row)
    # keeps them in bf16.
    mpt_h100 = ["plan.attention_kernel=triton2023"]
    mpt_a100 = ["cluster.inter_bw_gbps=25", "plan.attention_kernel=triton2023"]
    for cl, extra, tag, table in [
            (H100, mpt_h100, "H100", [("70b", 2048, 64, 8, 4, True, 1039), ("30b", 2048, 32, 14, 3, True, 2308),
                                      ("13b", 2048, 8, 2, 1, False, 4792), ("13b", 4096, 8, 10, 3, True, 4717),
                                      ("7b", 2048, 8, 6, 1, False, 10643), ("7b", 8192, 8, 8, 2, True, 6935),
                                      ("3b", 2048, 64, 6, 3, False, 22525), ("1b", 2048, 8, 14, 1, False, 45455),
                                      ("760m", 2048, 16, 24, 1, False, 68551), ("1b", 32768, 8, 1, 4, False, 12025)]),
            (A100, mpt_a100, "A100", [("70b", 2048, 64, 8, 4, True, 410), ("30b", 2048, 8, 3, 21, True, 916),
                                      ("13b", 2048, 8, 2, 3, False, 2262), ("7b", 2048, 8, 6, 2, False, 4641),
                                      ("3b", 2048, 8, 10, 2, False, 10811), ("1b", 2048, 8, 14, 4, False, 20513),
                                      ("760m", 2048, 8, 24, 2, False, 32434), ("7b", 32768, 8, 2, 2, True, 1672)])]:
        for size, s, g, mb, ga, ac, pub in table:
            l, h, a = MPT[size]
            add(MOSAIC, f"MPT-{size} s{s} {tag} FSDP{g}", cl, g, gpt(l, h, a, V=50368, s=s), mb * ga * g,
                f"tp=1,pp=1,mb={mb},zero=3,recompute={'full' if ac else 'none'},cp=1", "tokens_per_gpu", pub,
                extra + (["plan.grad_bytes=2"] if (tag, size) == ("A100", "70b") else []), "llm-foundry")
    # Megatron-Core r0.8.0 on H100 (Megatron-LM's README): GPT models with untied embeddings (1.7B = 24 layers of
    # h 2048 plus two 131072 x 2048 tables), DP 48 throughout. The table gives TP and PP; micro-batch, interleaving
    # and recompute are not stated: the search picks them, as for Llama 3. bf16 Megatron accumulates and reduces
    # gradients in fp32; its default dropout (0.1) and unfused cross-entropy.
    for name, a, h, l, tp, pp, B, pub in [
            ("1.7B", 16, 2048, 24, 1, 1, 192, 408.8), ("7.1B", 32, 4096, 30, 2, 1, 192, 465.9),
            ("16B", 48, 6144, 32, 4, 1, 192, 489.1), ("32B", 56, 7168, 48, 8, 1, 192, 459.6),
            ("70B", 64, 8192, 84, 8, 2, 384, 419.7), ("119B", 80, 10240, 92, 8, 4, 768, 420.5),
            ("177B", 96, 12288, 96, 8, 6, 1152, 432.8), ("314B", 128, 16384, 96, 8, 8, 1536, 474.4),
            ("462B", 144, 18432, 112, 8, 16, 3072, 459.9)]:
        sp = "sp=on,tp_overlap=on" if tp > 1 else "sp=off"
        add(MCORE_08, f"MCore 0.8 GPT {name}", H100, 48 * tp * pp, dict(gpt(l, h, a, V=131072, s=4096),
                                                                         tied_embeddings="false"), B,
            f"tp={tp},pp={pp},cp=1,mb=[1,2,4],zero=1,recompute=[none,selective],{sp}", "model_tflops", pub,
            preset="megatron-lm")
    # Nemotron-4 340B (Megatron-Core under NeMo): 96 layers of h 18432, 96 query and 8 key/value heads, a
    # non-gated squared-ReLU MLP of 4h (priced as GPT's GELU MLP: the same GEMMs), untied 256k vocabulary, s = 4096.
    # Three stages of the batch ramp: DP 16, 32 and 64 replicas of TP8 x PP12. Recompute is not stated: the search
    # picks none or selective.
    nemotron4 = dict(gpt(96, 18432, 96, V=256000, s=4096), kv_heads=8, ffn_hidden=73728, tied_embeddings="false")
    for dp, B, step_s in [(16, 768, 10.3), (32, 1536, 10.3), (64, 2304, 8.0)]:
        add(NEMOTRON4, f"Nemotron-4 340B DP{dp} {96 * dp} GPUs", H100, 96 * dp, nemotron4, B,
            "tp=8,pp=12,v=8,cp=1,mb=1,zero=1,recompute=[none,selective],sp=on,tp_overlap=on", "step_s", step_s,
            ["plan.dropout=false"], "nemo", holdout=True)
    # The README's strong scaling of the same 177B model: the two ends it states.
    for g, mfu in [(96, 0.47), (4608, 0.42)]:
        add(MCORE_STRONG, f"MCore 0.8 GPT 177B strong {g} GPUs", H100, g,
            dict(gpt(96, 12288, 96, V=131072, s=4096), tied_embeddings="false"), 1152,
            "tp=8,pp=6,cp=1,mb=[1,2,4],zero=1,recompute=[none,selective],sp=on,tp_overlap=on", "model_tflops",
            round(mfu * 989, 1), preset="megatron-lm", holdout=True)
    # Llama 3 405B (Meta): TP8 PP16 (126 layers: uneven stages), CP16 for 128k context.
    l3_405b = llama(126, 16384, 128, 8, 53248, 128256, 8192)
    l3_405b_long = dict(l3_405b, seq_len=131072)
    meta = fa + ["cluster.inter_bw_gbps=50"]
    add(LLAMA3, "Llama3 405B 8192 GPUs", H100, 8192, l3_405b, 2048,
        "tp=8,pp=16,cp=1,mb=1,zero=1,recompute=[none,selective]", "model_tflops_causal", 430, meta)
    add(LLAMA3, "Llama3 405B 16384 GPUs", H100, 16384, l3_405b, 2048,
        "tp=8,pp=16,cp=1,mb=1,zero=1,recompute=[none,selective]", "model_tflops_causal", 400, meta)
    # Section 3.3.2: Meta's CP all-gathers K and V, then computes the local query chunk (exposed, but small with
    # GQA), instead of a ring: priced as plan.cp_comm = allgather.
    add(LLAMA3, "Llama3 405B 16384 GPUs CP16 128k", H100, 16384, l3_405b_long, 128,
        "tp=8,pp=16,cp=16,mb=1,zero=1,recompute=[none,selective]", "model_tflops_causal", 380,
        meta + ['plan.cp_comm="allgather"'])
    # FP8 on H100 (Megatron-Core + Transformer Engine): the four linear layers of each transformer layer run in FP8,
    # attention (FlashAttention/cuDNN) and the output layer in bf16. Recompute is not stated: the search picks
    # none or selective, whichever fits and is faster, as the published configurations would.
    nemo = ["plan.precision=fp8"]
    l2_7b = llama(32, 4096, 32, 32, 11008, 32000, 4096)
    for name, model, g, B, mb, tp, pp, cp, vp, pub in [
            ("GPT3-5B", gpt(24, 4096, 32, V=50304), 64, 2048, 4, 1, 1, 1, 1, 22521),
            ("GPT3-20B", gpt(44, 6144, 48, V=50304), 64, 256, 2, 2, 1, 1, 1, 5851),
            ("GPT3-175B 128 GPUs", gpt(96, 12288, 96, V=50304), 128, 256, 1, 4, 8, 1, 6, 726),
            ("GPT3-175B 512 GPUs", gpt(96, 12288, 96, V=50304), 512, 2048, 2, 4, 8, 1, 6, 782),
            ("Llama2-7B", l2_7b, 8, 128, 1, 1, 1, 1, 1, 16847),
            ("Llama2-13B", l2_13b, 16, 128, 1, 1, 4, 1, 10, 8646),
            ("Llama2-70B", l2_70b, 64, 128, 1, 4, 4, 1, 20, 1707),
            ("Llama3-8B", l3_8b, 8, 128, 1, 1, 1, 2, 1, 12036),
            ("Llama3-70B", l3_70b, 64, 128, 1, 4, 4, 2, 5, 1533)]:
        sp = "sp=on,tp_overlap=on" if tp > 1 else "sp=off"
        # NeMo's launcher configs of that release set cross_entropy_loss_fusion for Llama (Megatron-Core's
        # native jit fusion), not for GPT3.
        ce = ["plan.cross_entropy=native"] if model["architecture"] == "llama" else []
        add(NEMO_2407, f"{name} FP8", H100, g, model, B,
            f"tp={tp},pp={pp},cp={cp},v={vp},mb={mb},zero=1,recompute=[none,selective],{sp}", "tokens_per_gpu", pub,
            nemo + ce, "nemo", fp8=True)
    # The same table's Nemotron rows (held out: added after the fit). NeMo's Nemotron models are GPT-style with a
    # non-gated squared-ReLU MLP (priced as GELU's: the same GEMMs, one elementwise kernel), LayerNorm, RoPE, no
    # biases or dropout, untied embeddings and a 256k vocabulary (NeMo's NemotronConfig: Nemotron-3 8B and 22B with
    # every head its own K/V, Nemotron-4 340B with 8 K/V heads), and cross_entropy_loss_fusion as the Llama rows.
    # The 340B plan on 128 GPUs is one the model puts at 86 GiB (the distributed optimizer's 12 bytes per parameter
    # over DP2 alone are 33 GiB); the published run fit, with memory settings the table does not state, so its
    # memory is lifted: the row checks time.
    def nemotron(l, h, a, kv, f):
        return dict(gpt(l, h, a, V=256000, s=4096), kv_heads=kv, ffn_hidden=f, tied_embeddings="false")
    for name, model, g, B, mb, tp, pp, vp, pub, extra in [
            ("Nemotron-8B", nemotron(32, 4096, 32, 32, 16384), 64, 256, 4, 2, 1, 1, 12701, []),
            ("Nemotron-22B", nemotron(40, 6144, 48, 48, 24576), 64, 256, 2, 2, 4, 10, 4256, []),
            ("Nemotron-340B", nemotron(96, 18432, 96, 8, 73728), 128, 32, 1, 8, 8, 12, 322, ["cluster.hbm_gib=120"])]:
        add(NEMO_2407, f"{name} FP8", H100, g, model, B,
            f"tp={tp},pp={pp},cp=1,v={vp},mb={mb},zero=1,recompute=[none,selective],sp=on,tp_overlap=on",
            "tokens_per_gpu", pub, nemo + ["plan.cross_entropy=native", "plan.dropout=false"] + extra, "nemo", fp8=True,
            holdout=True)
    # Megatron-Bridge's performance scripts set cross_entropy_fusion_impl = "te" (its fused kernel); their FP8-CS
    # precision is bf16_with_fp8_current_scaling_mixed() with first_last_layers_bf16 turned off
    # (scripts/performance/utils/precision.py), which keeps fp8_param_gather = True (training/mixed_precision.py).
    cs = nemo + ["plan.fp8_scaling=current", "plan.cross_entropy=fused", "plan.fp8_param_gather=true"]
    add(BRIDGE_2511, "Llama3-8B FP8-CS FSDP8", H100, 8, l3_8b, 128,
        "tp=1,pp=1,cp=1,mb=1,zero=3,recompute=[none,selective],sp=off", "tokens_per_gpu", 14451,
        cs + ["plan.zero3_impl=megatron"], "nemo", fp8=True)
    add(BRIDGE_2511, "Llama3-70B FP8-CS", H100, 64, l3_70b, 128,
        "tp=4,pp=8,cp=1,v=5,mb=1,zero=1,recompute=[none,selective],sp=on,tp_overlap=on", "tokens_per_gpu", 1602, cs,
        "nemo", fp8=True)
    add(BRIDGE_2511, "Llama3.1-405B FP8-CS 1024 GPUs", H100, 1024, l31_405b, 512,
        "tp=8,pp=8,cp=2,v=8,mb=1,zero=1,recompute=[none,selective],sp=on,tp_overlap=on", "tokens_per_gpu", 292, cs,
        "nemo", fp8=True)
    # Long context on the same stack (held out): one 7B model from 4k to 1M tokens, each row with the step's 4M tokens,
    # context parallelism from 32k on. Attention is most of the work from 128k on (97 % of the counted FLOPs at 1M), so
    # these rows check the attention kernel's rate and the ring under load. The table does not state recompute or the
    # micro-batch: the search picks none or selective, as for the rows above, at micro-batch 1.
    for sk, g, B, tp, pp, cp, pub in [(4, 4, 1024, 1, 1, 1, 768), (8, 8, 512, 1, 2, 1, 730), (16, 16, 256, 2, 1, 1, 660),
                                      (32, 32, 128, 2, 1, 2, 610), (64, 64, 64, 4, 1, 2, 574),
                                      (128, 128, 32, 4, 1, 4, 555), (256, 256, 16, 4, 1, 8, 549),
                                      (512, 512, 8, 8, 1, 16, 549), (1024, 1024, 4, 8, 1, 32, 536)]:
        sp = "sp=on,tp_overlap=on" if tp > 1 else "sp=off"
        add(NEMO_LONG_2403, f"Llama2-7B FP8 {sk}k TP{tp} PP{pp} CP{cp}", H100, g, dict(l2_7b, seq_len=sk * 1024), B,
            f"tp={tp},pp={pp},cp={cp},v=1,mb=1,zero=1,recompute=[none,selective],{sp}", "model_tflops", pub,
            nemo + ["plan.cross_entropy=native"], "nemo", fp8=True, holdout=True)
    # Alternate fit / held-out within each source.
    seen = {}
    for r in out:
        if r["holdout"]:
            r["half"] = "held-out"
            continue
        i = seen.get(r["src"], 0)
        seen[r["src"]] = i + 1
        r["half"] = "fit" if i % 2 == 0 else "held-out"
    return out


def predict(binary, r, consts):
    gpn = 8
    sets = [f"model.{k}={v}" for k, v in r["model"].items()]
    sets += [f"cluster.nodes={max(1, r['gpus'] // gpn)}", f"cluster.gpus_per_node={min(gpn, r['gpus'])}",
             f"train.global_batch={r['batch']}"]
    if consts and r["fp8"]:
        sets += [f"cluster.fp8_gemm_max_efficiency={MAMF_FP8[r['cluster']] * consts['sustain']:.4f}"]
    elif consts:
        sets += [f"cluster.gemm_max_efficiency={MAMF[r['cluster']] * consts['sustain']:.4f}"]
    if r["preset"] == "torchtitan":  # eager: this model's elementwise bytes (the preset holds Llama 3's 3.1)
        sets += [f"plan.memory_bound_factor={titan_eager_factor(r['model']):.3f}"]
    sets += r["sets"]
    with tempfile.TemporaryDirectory() as out:
        cmd = [binary, "--config", r["cluster"], "--plan", r["plan"], "--out", out, "--top", "1", "--log-level",
               "error", "--json", "-"]
        if r["preset"]:
            cmd += ["--config", os.path.join(STACKS, r["preset"] + ".toml")]
        for s in sets:
            cmd += ["--set", s]
        p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
    doc = json.loads(p.stdout)
    plan, model = doc["plans"][0], doc["model"]
    causal_flops = model["model_flops_per_token"] - 6 * model["layers"] * model["hidden"] * model["seq_len"]
    value = {"hw_tflops": plan["hw_tflops_per_gpu"], "model_tflops": plan["tflops_per_gpu"],
             "model_tflops_causal": plan["tokens_per_s"] * causal_flops / r["gpus"] / 1e12,
             "step_s": plan["step_time_s"], "tokens_per_gpu": plan["tokens_per_s"] / r["gpus"]}[r["metric"]]
    return value, plan


def device_key(r):
    # FP8 rows fit their own constant (cluster.fp8_gemm_max_efficiency); their bf16 GEMMs keep the device's.
    return r["cluster"] + (":fp8" if r["fp8"] else "")


def predict_value(binary, r, consts):
    return predict(binary, r, consts)[0]


def error(r, pred):
    # Signed relative error of the predicted speed (step time inverted so that + means too optimistic).
    if r["metric"] == "step_s":
        return r["published"] / pred - 1
    return pred / r["published"] - 1


def evaluate(binary, table, consts):
    res = []
    for r in table:
        pred, plan = predict(binary, r, consts)
        res.append((r, pred, plan))
    return res


def summary(res, half):
    errs = [abs(error(r, p)) for r, p, _ in res if p is not None and (half is None or r["half"] == half)]
    if not errs:
        return float("nan"), float("nan"), 0
    return 100 * sum(errs) / len(errs), 100 * max(errs), len(errs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("CAIRN_BIN_DIR", "build/bin"))
    ap.add_argument("--fit", action="store_true", help="search the global constants on the fit half")
    ap.add_argument("--json", help="write every row's prediction here")
    args = ap.parse_args()
    binary = os.path.join(args.bin, "cairn-plan")
    table = rows()
    if args.fit:
        fit_rows = [r for r in table if r["half"] == "fit"]
        sustains = [round(0.60 + 0.02 * i, 2) for i in range(21)]
        jobs = [(binary, r, {"sustain": su}) for r in fit_rows for su in sustains]
        with multiprocessing.Pool(max(1, os.cpu_count() or 1)) as pool:
            preds = pool.starmap(predict_value, jobs)
        # errs[device][sustain]: |log error| of each fit row on that device
        errs = {}
        for (_, r, k), p in zip(jobs, preds):
            if p is None:
                continue
            e = abs(math.log(p / r["published"] if r["metric"] != "step_s" else r["published"] / p))
            errs.setdefault(device_key(r), {}).setdefault(k["sustain"], []).append(e)
        chosen = {dev: min(tab, key=lambda su: sum(tab[su])) for dev, tab in errs.items()}
        total = sum(sum(errs[dev][su]) for dev, su in chosen.items())
        mamf = lambda dev: MAMF_FP8[dev[:-4]] if dev.endswith(":fp8") else MAMF[dev]
        out = {"fit_rows": len(fit_rows),
               "gemm_max_efficiency": {dev: round(mamf(dev) * su, 3) for dev, su in chosen.items()},
               "sustain": chosen, "mean_abs_log_error": total / len(fit_rows)}
        print(json.dumps(out, indent=1))
        return 0
    res = evaluate(binary, table, None)
    print(f"{'half':8} {'run':36} {'metric':14} {'published':>10} {'predicted':>10} {'error':>7}  plan")
    for r, p, plan in res:
        if p is None:
            print(f"{r['half']:8} {r['name']:36} {r['metric']:14} {r['published']:>10} {'FAILED':>10}  {plan}")
            continue
        desc = "dp{dp} tp{tp} pp{pp} cp{cp} v{v} mb{mb} z{zero} {recompute} sp={sp} tpov={tp_overlap}".format(**plan)
        print(f"{r['half']:8} {r['name']:36} {r['metric']:14} {r['published']:>10.4g} {p:>10.4g} "
              f"{100 * error(r, p):>+6.1f}%  {desc}")
    for half in ("fit", "held-out", None):
        mean, mx, n = summary(res, half)
        print(f"{half or 'all':8} rows {n:3d}: mean |error| {mean:5.1f}%, max {mx:5.1f}%")
    # Per source (its citation's first words), both halves: where the model stands stack by stack.
    by_source = {}
    for r, p, _ in res:
        if p is not None:
            by_source.setdefault(r["src"].split(":")[0][:60], []).append(100 * error(r, p))
    print(f"{'source':60} {'rows':>4} {'mean|e|':>8} {'signed':>7} {'max|e|':>7}")
    for src, errs in by_source.items():
        print(f"{src:60} {len(errs):4d} {sum(map(abs, errs)) / len(errs):7.1f}% {sum(errs) / len(errs):+6.1f}% "
              f"{max(map(abs, errs)):6.1f}%")
    failed = sum(1 for _, p, _ in res if p is None)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"name": r["name"], "src": r["src"], "half": r["half"], "metric": r["metric"],
                        "published": r["published"], "predicted": p} for r, p, _ in res], f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
