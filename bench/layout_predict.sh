#!/usr/bin/env bash
# Benchmark (prints figures; not a test): the cost model against cairn-train, layout by layout.
# Calibrates cairn-plan on this machine (`cairn-plan calibrate`, one OpenBLAS thread, as cairn-train
# runs with --threads 1; `mpirun -np R cairn-sweep` per rank count for fabric.toml), then for every DP/CP/TP/PP/v/ZeRO/SP
# (/recompute) layout of 1, 2 and 4 ranks that the model allows it asks `cairn-plan --explain --plan ...`
# for exactly that layout and trains it a few steps with cairn-train, and prints predicted vs measured
# step time (median time_s.total after WARMUP steps) and memory per rank (max mem_gib over ranks and
# steps; the prediction is counted the same way: no reserved runtime memory). Writes
# <out>/layout_predict.json (rows + provenance), which cairn-report shows when given <out> as a run.
#
# Oversubscription: R ranks on C cores (C = nproc) each get min(1, C/R) of a core, so each layout is
# planned on a cluster of R devices ("gpus_per_node" = R) whose peak FLOP/s, memory bandwidth and
# per-kernel overhead are the one-thread calibration scaled by min(1, C/R); with R > C the pipeline bubble is
# dropped (other ranks run in it), bounded below by the plan at a whole core per rank. Collective fits come from an R-rank
# sweep per rank count R (oversubscribed like the training run when R > C). Ranks of a layout of 2+ ranks compute at
# the pace of the slowest of C pinned copies of the 1-rank layout trained at the same moment (contention/ in OUT_DIR).
#
# Usage: bench/layout_predict.sh [OUT_DIR]        (default: a fresh /tmp/cairn_layout_predict.XXXXXX, kept)
#   env: CAIRN_BIN_DIR (build/bin)  LAYERS 4  HIDDEN 128  HEADS 4  SEQ 128  GB 16 (global batch)  MB 2
#        STEPS 20  WARMUP 4  RANKS "1 2 4"  RECOMPUTE "none" (e.g. "none full")  ZEROS "0 1 2 3" (ZeRO stages
#        of layouts with dp*cp > 1)  CORES (nproc)
#        CONTENTION_PAIRS 3 (solo / all-cores runs of the 1-rank layout whose median factor prices 2+ rank layouts)
#        CP_COMM p2p (Megatron's default, the ring; or allgather: how cp layouts move K/V, in cairn-train and in
#        the plan alike)
#        PLAN_EXTRA (more cairn-plan arguments for every prediction, e.g. "--set cluster.overlap_slowdown=1")
#        FABRIC_RANKS (price every layout with the sweep of that many ranks instead of its own rank count)
#        SWEEP_EXTRA (more cairn-sweep arguments for the fabric sweeps, e.g. "--mpi-nonblocking": the MPI_I* calls
#        cairn-train's gradient and ZeRO reductions make, which Open MPI runs with other algorithms than the blocking)
#        FILTER (python regex on the layout string, e.g. 'tp=2'; matching none is exit 2)  TARGET 15 (% bar; exits 0 regardless)
#        RETRY 1, BG_MAX 0.25: rerun a layout (or a fabric sweep) up to RETRY times while other processes used more
#        than BG_MAX cores during it (the "bg" column: cores used by the rest of the machine; keep it ~0)
#        ROUNDS 2: train every layout ROUNDS times, in rounds over all layouts (so a layout's runs lie minutes apart),
#        and keep its fastest run, as the calibration keeps its faster machine; the table shows the spread (a VM's
#        oversubscribed layouts drift by 20-50 % within an hour with no other load: cp=4 at 122 then 155 ms)
#        LEARN 1: learn the site from the runs (`cairn-plan calibrate --from-runs` on the layouts of the largest rank
#        count that is not oversubscribed, 2 here: the compute factor and the fraction of the sweep's speed training's
#        collectives get) and price every layout again with the refitted cluster file; the layouts of other rank counts
#        are held out of that fit (the "learned" columns and summary); LEARN=0 skips it
#        KERNEL_PROFILE 1: train with --profile-kernels (train/kernel_profile.json), so that the learning step fits
#        GEMM, attention and memory-bound kernels apart (their shares of the measured compute); 0: one compute factor
#        PREDICT_ONLY 1: re-price an earlier run in OUT_DIR (its calibration, contention factor, sweeps, attention
#        measurement and training runs kept, nothing measured again) with this cairn-plan and PLAN_EXTRA: model
#        changes compared on the same measurements, free of the run-to-run drift of a VM's calibration
set -euo pipefail
trap 'echo "layout_predict.sh: failed at line $LINENO" >&2' ERR
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CAIRN_BIN_DIR:-$ROOT/build/bin}
BIN=$(cd "$BIN" && pwd)
OUT=${1:-$(mktemp -d /tmp/cairn_layout_predict.XXXXXX)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
L=${LAYERS:-4} H=${HIDDEN:-128} A=${HEADS:-4} S=${SEQ:-128} GB=${GB:-16} MB=${MB:-2}
STEPS=${STEPS:-20} WARMUP=${WARMUP:-4} RANKS=${RANKS:-1 2 4} RECOMPUTE=${RECOMPUTE:-none} ZEROS=${ZEROS:-0 1 2 3}
CORES=${CORES:-$(nproc)} TARGET=${TARGET:-15} FILTER=${FILTER:-} RETRY=${RETRY:-1} BG_MAX=${BG_MAX:-0.25}
ROUNDS=${ROUNDS:-2}
FABRIC_RANKS=${FABRIC_RANKS:-}
read -r -a SWEEP_EXTRA <<< "${SWEEP_EXTRA:-}"
PREDICT_ONLY=${PREDICT_ONLY:-0}
if [ "$PREDICT_ONLY" = 1 ] && [ ! -s "$OUT/layouts.txt" ]; then
  echo "layout_predict: PREDICT_ONLY=1 needs an earlier run in \"$OUT\": no layouts.txt there" >&2
  exit 2
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PY=/usr/bin/python3
busy_jiffies() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
# background TIMEFILE B0 B1: "CORES SECONDS", the cores the rest of the machine used while the command timed in
# TIMEFILE (/usr/bin/time -f "%e %U %S") ran, from busy_jiffies before (B0) and after (B1), and its elapsed seconds.
background() {
  $PY -c "import os, sys; e, u, s = map(float, open(sys.argv[1]).read().split()[-3:]); b0, b1 = map(float, sys.argv[2:])
print(f'{max(0.0, ((b1 - b0) / os.sysconf(\"SC_CLK_TCK\") - u - s) / e):.2f} {e:.1f}')" "$1" "$2" "$3"
}
F=/usr/share/games/fortunes
T0=$(date +%s)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
# Byte tokenizer: 257 ids, padded to 320 as cairn-train does.
MODEL=(--set model.layers=$L --set model.hidden=$H --set model.heads=$A --set model.seq_len=$S
       --set model.vocab=320 --set train.global_batch=$GB)
# How every training run of the bench trains (the contention runs and the layouts alike): STEPS steps, one thread,
# nothing written but metrics.
TRAIN_COMMON=(--data "$OUT/ds" --threads 1 --log-level warn "${MODEL[@]}" --steps "$STEPS" --set train.warmup=1
              --set train.checkpoint_every=0 --set train.val_every=0 --set train.tensorboard=false
              --set train.resume=\"none\" --set parallel.mb=$MB)
[ "${KERNEL_PROFILE:-1}" = 1 ] && TRAIN_COMMON+=(--profile-kernels)
# cairn-train's attention keeps only the row log-sum-exp, never the s x s probabilities, and recomputes
# them in backward (tools/train/README.md): to the cost model that is flash attention (memory and FLOPs).
# cairn-train: TP collectives synchronous, no dropout (its GPT has none); context parallelism's K/V exchange
# (CP_COMM: p2p = ring, allgather) is the same on both sides.
CP_COMM=${CP_COMM:-p2p}
if [ "${PREDICT_ONLY:-0}" = 1 ] && [ -s "$OUT/cp_comm" ]; then CP_COMM=$(cat "$OUT/cp_comm"); fi  # as it trained
PLAN_SETS=(--set plan.flash_attention=true --set plan.tp_async_backward=false --set plan.dropout=false
           --set "plan.cp_comm=\"$CP_COMM\"" --set cluster.attention_tile=32)
read -r -a PLAN_EXTRA <<< "${PLAN_EXTRA:-}"

# Layouts: "dp tp pp v zero sp recompute cp" (context parallelism: each sequence in 2*cp load-balanced chunks),
# chosen (and FILTER checked) before any measurement;
# PREDICT_ONLY: those of the earlier run (layouts.txt: name dp tp pp v zero sp recompute ranks cp).
if [ "$PREDICT_ONLY" = 1 ]; then
  LAYOUTS=$(awk '{print $2, $3, $4, $5, $6, $7, $8, $10}' "$OUT/layouts.txt")
else LAYOUTS=$($PY - "$L" "$A" "$S" "$GB" "$MB" "$RANKS" "$RECOMPUTE" "$FILTER" "$ZEROS" <<'PY'
import sys, re
l, a, s, gb, mb = map(int, sys.argv[1:6]); ranks = [int(x) for x in sys.argv[6].split()]
recs = sys.argv[7].split(); flt = sys.argv[8]; zeros = [int(z) for z in sys.argv[9].split()]
for R in ranks:
  for cp in (1, 2, 4):
    for tp in (1, 2, 4):
        for pp in (1, 2, 4):
            if R % (cp * tp * pp): continue
            dp = R // (cp * tp * pp)
            if a % tp or l % pp or s % (2 * cp) or (s // cp) % tp or gb % (dp * mb): continue
            m = gb // (dp * mb)
            for v in ((1, 2) if pp > 1 else (1,)):
                if v > 1 and (l % (pp * v) or m % pp): continue
                for zero in (zeros if dp * cp > 1 else (0,)):
                    for sp in (("off", "on") if tp > 1 else ("off",)):
                        for rc in recs:
                            key = f"dp={dp},tp={tp},pp={pp},v={v},mb={mb},zero={zero},recompute={rc},sp={sp}"
                            key += f",cp={cp}" if cp > 1 else ""
                            # Also as the README's and report's tables print it (without mb and recompute).
                            shown = f"dp={dp},tp={tp},pp={pp},v={v},zero={zero},sp={sp}" + (f",cp={cp}" if cp > 1 else "")
                            if flt and not (re.search(flt, key) or re.search(flt, shown)): continue
                            print(dp, tp, pp, v, zero, sp, rc, cp)
PY
); fi
N=$(echo "$LAYOUTS" | grep -c . || true)
if [ "$N" -eq 0 ] && [ -n "$FILTER" ]; then
  echo "layout_predict: FILTER='$FILTER' matches no layout (keys read dp=2,tp=1,pp=2,v=1,mb=2,zero=1,recompute=none,sp=off[,cp=2] or, as the tables print them, dp=2,tp=1,pp=2,v=1,zero=1,sp=off[,cp=2])" >&2
  exit 2
fi

echo "== dataset, calibration, sweep -> $OUT$([ "$PREDICT_ONLY" = 1 ] && echo " (kept: PREDICT_ONLY)")" >&2
[ -f "$OUT/ds/index.json" ] || [ "$PREDICT_ONLY" = 1 ] || "$BIN/cairn-reshard" --log-level warn --out "$OUT/ds" --set 'data.delimiter="%"' \
  --set data.shards=2 build "$F/fortunes" "$F/computers" "$F/science"
# Cores of a VM need not be equally fast (the host shares them out: on the 2-vCPU VM one ran the 1-rank layout at 152
# ms/step and the other at 178): one-process measurements and the 1-rank layout are pinned to the first core (PIN0,
# empty without taskset), and ranks of 2+ rank layouts are priced at the pace of the slowest core (below).
PIN0=()
command -v taskset > /dev/null && PIN0=(taskset -c 0)
# One thread on one core; the peak set here is one core's (2.6 GHz x 32 fp32 FLOP/cycle); calibrate
# replaces it by the best measured sgemm rate when that is higher (boost clock).
# Other jobs only ever slow a measurement down: calibrate twice and keep the faster machine.
for k in 1 2; do
  [ "$PREDICT_ONLY" = 1 ] && break
  "${PIN0[@]}" "$BIN/cairn-plan" calibrate --config "$ROOT/configs/clusters/cpu-local.toml" --set cluster.peak_tflops=0.083 \
    "${MODEL[@]}" --seconds 0.3 --max-dim 512 --output "$OUT/cpu1-$k.toml" --out "$OUT" --log-level error > /dev/null
done
[ "$PREDICT_ONLY" = 1 ] || $PY - "$OUT" <<'PY'
import tomllib, sys, shutil
o = sys.argv[1]
rate = lambda k: (lambda c: c["peak_tflops"] * c["gemm_max_efficiency"])(tomllib.load(open(f"{o}/cpu1-{k}.toml", "rb"))["cluster"])
best = max((1, 2), key=rate)
shutil.copy(f"{o}/cpu1-{best}.toml", f"{o}/cpu1.toml")
print(f"calibration: best sgemm {rate(1)*1e3:.1f} / {rate(2)*1e3:.1f} GFLOP/s, kept run {best}", file=sys.stderr)
PY
# All cores busy at once: the ranks of a multi-rank layout share the memory system, caches and (on a VM) the host
# cores behind the vCPUs, and synchronous training runs at the pace of its slowest rank. sgemm calibrations run side
# by side miss most of it (x1.00 on a VM whose second core trained 17 % slower), so the rate is taken from the
# workload itself: the 1-rank layout trained alone on the first core, then one copy pinned to every core at the same
# moment; every rank of a layout of 2+ ranks is priced at solo / slowest copy's step time (BUSY, at most 1) of the
# calibrated peak and bandwidth. CONTENDED=0 prices them at the solo rate.
BUSY=1
if [ "${CONTENDED:-1}" = 1 ] && [ "$CORES" -gt 1 ]; then
  train_alone() {  # DIR [CORE]: the 1-rank layout, STEPS steps, as the layouts below run it (pinned to CORE)
    local pin=()
    [ -n "${2:-}" ] && [ ${#PIN0[@]} -gt 0 ] && pin=(taskset -c "$2")
    "${pin[@]}" "$BIN/cairn-train" --out "$1" "${TRAIN_COMMON[@]}" > "$1.log" 2>&1 < /dev/null
  }
  # One such pair is a noisy figure (x0.94 and x1.00 on the same VM within the hour): CONTENTION_PAIRS pairs, solo
  # then all cores, and the median of their factors.
  if [ "$PREDICT_ONLY" != 1 ]; then
    rm -rf "$OUT/contention"; mkdir -p "$OUT/contention"
    for j in $(seq "${CONTENTION_PAIRS:-3}"); do
      train_alone "$OUT/contention/solo-$j" 0
      pids=()
      for k in $(seq "$CORES"); do train_alone "$OUT/contention/busy-$j-$k" $((k - 1)) & pids+=($!); done
      wait "${pids[@]}"
    done
  fi
  BUSY=$($PY - "$OUT/contention" "$CORES" "$WARMUP" <<'PY'
import json, os, statistics, sys
d, n, warm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def step(run):
    tr = [json.loads(x) for x in open(f"{d}/{run}/train/metrics.jsonl") if '"train"' in x]
    return statistics.median(r["time_s"]["total"] for r in (tr[warm:] or tr))
# solo-J with busy-J-1..n per pair; an output directory of an earlier version has one pair, solo and busy-1..n
pairs = [(f"solo-{j}", [f"busy-{j}-{k}" for k in range(1, n + 1)]) for j in range(1, 100) if os.path.isdir(f"{d}/solo-{j}")]
pairs = pairs or [("solo", [f"busy-{k}" for k in range(1, n + 1)])]
factors, lines = [], []
for solo_run, busy_runs in pairs:
    solo, busy = step(solo_run), [step(b) for b in busy_runs]
    factors.append(min(1.0, solo / max(busy)))
    lines.append(f"{solo * 1e3:.1f} alone, {' / '.join(f'{b * 1e3:.1f}' for b in busy)} at once (x{factors[-1]:.3f})")
f = statistics.median(factors)
print(f"{f:.4f}")
print(f"contention: the 1-rank layout in ms/step on cores 0-{n - 1}: {'; '.join(lines)}: ranks of 2+ rank layouts at "
      f"x{f:.3f} (median)", file=sys.stderr)
PY
)
fi
BUSY_GEMM=$BUSY BUSY_BW=$BUSY
# The fabric of each rank count, measured as cairn-train will run it: R ranks on the CORES cores, oversubscribed
# when R > CORES. Oversubscribed ranks wait for a time slice in every collective (a 4-rank all-reduce of 8 bytes
# takes ~0.2 ms on 2 cores against ~1 us for 2 ranks), which a 2-rank sweep cannot show.
SWEEP_RANKS=$(for R in $RANKS $FABRIC_RANKS; do if [ "$R" -gt 1 ]; then echo "$R"; fi; done | sort -nu)
# Other processes distort a sweep as they distort training (a compile during one once fitted the 4-rank all-gather
# at 2.4 ms latency instead of 17 us and priced every SP layout 3x too slow): a sweep during which the rest of the
# machine used more than BG_MAX cores is run again (up to RETRY times), the last one kept with a warning.
for R in $SWEEP_RANKS; do
  [ "$PREDICT_ONLY" = 1 ] && break
  MPI=(mpirun -np "$R")
  [ "$R" -gt "$CORES" ] && MPI+=(--oversubscribe)
  for try in $(seq 0 "$RETRY"); do
    b0=$(busy_jiffies)
    /usr/bin/time -f "%e %U %S" -o "$OUT/sweep-$R.time" "${MPI[@]}" "$BIN/cairn-sweep" \
      allreduce,allgather,reducescatter,sendrecv -b 8 -e 8M -f 4 --tiers world,intra --out "$OUT/sweep-$R" \
      --malloc-tune --log-level warn "${SWEEP_EXTRA[@]}" > "$OUT/sweep-$R.txt"  # malloc as cairn-train runs it
    b1=$(busy_jiffies)
    read -r bgc _ < <(background "$OUT/sweep-$R.time" "$b0" "$b1")
    $PY -c "import sys; sys.exit(0 if $bgc <= $BG_MAX else 1)" && break
    echo "sweep of $R ranks: other processes used $bgc cores during it$([ "$try" -lt "$RETRY" ] && echo ", again" ||
      echo "; kept (its fits may be off)")" >&2
  done
done
# The fabric a layout of R ranks is priced with: FABRIC_RANKS's sweep when set, else R's own (1 rank: the
# smallest sweep; its collectives are never used).
fabric_of() {
  local r=${FABRIC_RANKS:-$1}
  [ "$r" -gt 1 ] || r=$(echo "$SWEEP_RANKS" | head -1)
  echo "$OUT/sweep-$r/sweep/fabric.toml"
}
read -r PEAK BW OVH < <($PY -c "import tomllib,sys; c=tomllib.load(open(sys.argv[1],'rb'))['cluster']
print(c['peak_tflops'], c['hbm_gbps'], c['kernel_overhead_us'])" "$OUT/cpu1.toml")
# site_args SHARE: SITE_ARGS, the cairn-plan arguments of the cluster that prices R ranks (R devices of one node, each
# on SHARE of a core at the contended rate BG / BB, the R-rank sweep's fabric; cpu1.toml, or CLUSTER_FILE). Both the
# predictions and the learning step's refit price with it.
site_args() {
  SITE_ARGS=(--config "$ROOT/configs/clusters/cpu-local.toml" --config "${CLUSTER_FILE:-$OUT/cpu1.toml}" "${MODEL[@]}"
             --set cluster.nodes=1 --set cluster.gpus_per_node=$R --set cluster.reserved_gib=0 "${PLAN_SETS[@]}"
             --set "cluster.peak_tflops=$($PY -c "print($PEAK * $1 * $BG)")"
             --set "cluster.hbm_gbps=$($PY -c "print($BW * $1 * $BB)")"
             --set "cluster.kernel_overhead_us=$($PY -c "print($OVH / ($1 * $BG))")"
             --set "cluster.fabric=\"$(fabric_of "$R")\"")
}
# cairn-train's attention kernel on this CPU, one thread, the bench's shape: its efficiency relative to the calibrated
# peak over the FLOPs the cost model counts for it (4 s^2 h per layer and sequence forward, times its causal fraction
# (1 + 1/ceil(s/32))/2: the CPU kernel scores tiles of 32 query rows against the keys up to their last row,
# cluster.attention_tile = 32; backward 2.5x forward). Counting the FLOPs here otherwise than the model does misprices
# attention (half the blocks here against whole 128-key tiles in the model once priced it at twice its time, +17-20 %
# on every layout). Its small per-tile GEMMs and row-wise softmax run far below the calibrated large-GEMM rate:
# without this the model would price it at a fused GPU kernel's default. Measured at the bench's sequence and at a quarter of it (the chunk a cp2 rank's ring
# blocks have): time = (score pairs + attention_row_keys x query rows) / rate, so the two give the rate
# (attention_efficiency) and the fixed work per query row and call (attention_row_keys), which makes context
# parallelism's short blocks slower per FLOP (a 32 x 32 block ran at ~40 % of the whole 128-token sequence's rate).
KBENCH=$BIN/../bench/kernels_gpt_bench
att_ms() {  # SEQ: attention forward + backward milliseconds per step of the bench's layers and micro-batch
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "${PIN0[@]}" "$KBENCH" --backend cpu --layers "$L" --hidden "$H" \
    --heads "$A" --seq "$1" --batch "$MB" --vocab 320 --steps 10 --profile 1 2>/dev/null |
    awk '/attention_(forward|backward)/ {t += $4} END {print t}'
}
if [ "$PREDICT_ONLY" = 1 ] && [ -s "$OUT/attention_efficiency" ]; then
  ATT_EFF=$(cat "$OUT/attention_efficiency")
  ATT_ROW=$(cat "$OUT/attention_row_keys" 2> /dev/null || echo 0)
  echo "attention kernel: attention_efficiency $ATT_EFF, attention_row_keys $ATT_ROW (kept)" >&2
  PLAN_SETS+=(--set "cluster.attention_efficiency=$ATT_EFF" --set "cluster.attention_row_keys=$ATT_ROW")
elif [ -x "$KBENCH" ]; then
  S2=$((S / 4))
  ATT_MS=$(att_ms "$S")
  ATT_MS2=$([ "$S2" -ge 8 ] && att_ms "$S2" || echo 0)
  read -r ATT_EFF ATT_ROW < <($PY - "$L" "$H" "$MB" "$PEAK" "$S" "$ATT_MS" "$S2" "$ATT_MS2" <<'PY'
import math, sys
l, h, b, peak, s1, ms1, s2, ms2 = map(float, sys.argv[1:])
frac = lambda s: 0.5 * (1 + 1 / math.ceil(s / 32))  # cluster.attention_tile = 32
K = 3.5 * 4 * h * b * l / (peak * 1e12)  # seconds per (score pair + row key) at efficiency 1
P, R = (lambda s: s * s * frac(s)), (lambda s: s)
t1, t2 = ms1 * 1e-3, ms2 * 1e-3
den = t2 * R(s1) - t1 * R(s2)
row = max(0.0, (t1 * P(s2) - t2 * P(s1)) / den) if t2 > 0 and den != 0 else 0.0
print(min(1.0, max(0.01, K * (P(s1) + row * R(s1)) / t1)), row)
PY
)
  echo "attention kernel: ${ATT_MS} ms per step of $L layers at seq $S, ${ATT_MS2} ms at $S2 -> attention_efficiency" \
    "$ATT_EFF, attention_row_keys $ATT_ROW" >&2
  echo "$ATT_EFF" > "$OUT/attention_efficiency"
  echo "$ATT_ROW" > "$OUT/attention_row_keys"
  PLAN_SETS+=(--set "cluster.attention_efficiency=$ATT_EFF" --set "cluster.attention_row_keys=$ATT_ROW")
else
  echo "layout_predict: $KBENCH not built: attention priced at the cluster file's attention_efficiency" >&2
fi

echo "== $N layouts, $STEPS steps each (cores $CORES; 1-thread peak ${PEAK} TFLOP/s, ${BW} GB/s, ${OVH} us/kernel)" >&2
# train_layout DEST: the current layout (dp tp pp v zero sp rc cp, R ranks) trained STEPS steps into DEST/train, its
# log in DEST/train.log and /usr/bin/time's "elapsed user system" in DEST/time; prints "BACKGROUND_CORES ELAPSED".
train_layout() {
  local dest=$1 mpi=(mpirun -np "$R") cmd b0 b1
  [ "$R" -gt "$CORES" ] && mpi+=(--oversubscribe)
  if [ "$R" -eq 1 ]; then cmd=("${PIN0[@]}" "$BIN/cairn-train"); else cmd=("${mpi[@]}" "$BIN/cairn-train"); fi
  mkdir -p "$dest"
  b0=$(busy_jiffies)
  /usr/bin/time -f "%e %U %S" -o "$dest/time" "${cmd[@]}" --out "$dest" "${TRAIN_COMMON[@]}" --set parallel.dp=$dp \
    --set parallel.tp=$tp --set parallel.pp=$pp --set parallel.v=$v --set parallel.zero=$zero \
    --set parallel.sp=\"$sp\" --set parallel.recompute=\"$rc\" --set parallel.cp=$cp \
    --set parallel.cp_comm=\"$CP_COMM\" > "$dest/train.log" 2>&1 < /dev/null ||
    echo "  train failed: $name (exit $?; see $dest/train.log)" >&2
  b1=$(busy_jiffies)
  background "$dest/time" "$b0" "$b1"
}
# median_step DIR: the median step time after WARMUP steps of DIR/train (empty when it has none)
median_step() {
  $PY -c "import json, statistics, sys
tr = [json.loads(x) for x in open(sys.argv[1]) if '\"train\"' in x][int(sys.argv[2]):]
print(statistics.median(r['time_s']['total'] for r in tr) if tr else '')" "$1/train/metrics.jsonl" "$WARMUP" 2>/dev/null
}
mkdir -p "$OUT/layouts"
[ "$PREDICT_ONLY" = 1 ] || echo "$CP_COMM" > "$OUT/cp_comm"
[ "$PREDICT_ONLY" = 1 ] || : > "$OUT/layouts.txt"
i=0
while read -r dp tp pp v zero sp rc cp; do
  [ -n "$dp" ] || continue
  i=$((i + 1))
  R=$((dp * cp * tp * pp))
  name="dp${dp}-tp${tp}-pp${pp}-v${v}-z${zero}-sp${sp}-${rc}"
  if [ "$cp" -gt 1 ]; then name="$name-cp$cp"; fi
  D=$OUT/layouts/$name
  # PREDICT_ONLY keeps the training run and replaces every prediction (none left from an earlier one if this fails)
  if [ "$PREDICT_ONLY" = 1 ]; then rm -rf "$D/plan" "$D/full" "$D/bg" "$D"/pred*.json; else rm -rf "$D"; mkdir -p "$D"; fi
  plan="dp=$dp,tp=$tp,pp=$pp,v=$v,mb=$MB,zero=$zero,recompute=$rc,sp=$sp,cp=$cp"
  # predict SHARE OUT JSON: cairn-plan's prediction of this layout with each rank on SHARE of one core (at the
  # contended rate when the layout has 2+ ranks). cairn-train's mem_gib counts cairn's own buffers only: no reserved
  # runtime memory in the prediction.
  if [ "$R" -gt 1 ]; then BG=$BUSY_GEMM BB=$BUSY_BW; else BG=1 BB=1; fi
  predict() {
    site_args "$1"
    "$BIN/cairn-plan" "${SITE_ARGS[@]}" --out "$2" --explain --plan "$plan" --json "$3" "${PLAN_EXTRA[@]}" "${@:4}"
  }
  predict "$($PY -c "print(min(1.0, $CORES / $R))")" "$D" "$D/pred.json" --log-level warn > "$D/explain.txt" \
    2> "$D/plan.err" || echo "plan failed: $(tail -1 "$D/plan.err")" >&2
  # Oversubscribed, the scheduler is work-conserving: a rank's pipeline bubble is another rank's compute time. The
  # prediction then drops the bubble, bounded below by the critical path at a whole core per rank (share 1).
  if [ "$R" -gt "$CORES" ]; then
    predict 1 "$D/full" "$D/pred_full.json" --log-level error > /dev/null 2>&1 || true
  fi
  if [ "$PREDICT_ONLY" = 1 ]; then
    best=$(cat "$D/background_cores" 2> /dev/null || echo nan)
  else
    # Other jobs on this machine slow every layout down: measure the CPU time the rest of the machine
    # used during the run (all busy jiffies in /proc/stat minus this job's rusage) and rerun a layout
    # (up to RETRY times) while that background exceeded BG_MAX cores; the least disturbed run is kept.
    best=""
    rm -rf "$D/kept"
    for try in $(seq 0 "$RETRY"); do
      rm -rf "$D/try"
      read -r bgc el < <(train_layout "$D/try")
      printf "  [%2d/%d] %-44s %5.1f s  background %.2f cores%s\n" "$i" "$N" "$name" "$el" "$bgc" \
        "$([ "$try" -gt 0 ] && echo " (retry $try)")" >&2
      if grep -qs '"train"' "$D/try/train/metrics.jsonl"; then
        if [ -z "$best" ] || $PY -c "import sys; sys.exit(0 if $bgc < $best else 1)"; then
          rm -rf "$D/kept"; mv "$D/try" "$D/kept"; best=$bgc
        fi
        $PY -c "import sys; sys.exit(0 if $best <= $BG_MAX else 1)" && break
      fi
      if [ "$try" -lt "$RETRY" ]; then sleep 2; fi
    done
    if [ -d "$D/kept" ]; then rm -rf "$D/try"; mv "$D/kept" "$D/try"; fi
    mv "$D/try"/* "$D"/; rmdir "$D/try"
    [ -n "$best" ] || best=nan
    echo "$best" > "$D/background_cores"
  fi
  # The same plan on the CPU share this run actually had (CFS: R + bg runnable threads on C cores).
  bshare=$($PY -c "b=float('$best'); print(min(1.0, $CORES / ($R + (0 if b != b else b))))")
  predict "$bshare" "$D/bg" "$D/pred_bg.json" --log-level error > /dev/null 2>&1 || true
  if [ "$PREDICT_ONLY" != 1 ]; then
    echo "$name $dp $tp $pp $v $zero $sp $rc $R $cp" >> "$OUT/layouts.txt"
    m=$(median_step "$D"); echo "${m:-nan}" > "$D/round_steps"
  fi
done <<< "$LAYOUTS"

# Rounds 2..ROUNDS: every layout again, in the same order, each run kept in DIR/round-K; the fastest run (median step)
# becomes the layout's measurement (DIR/train, time, train.log, background_cores), the others stay in the round's
# directory, and DIR/round_steps lists every round's median step time.
for k in $(seq 2 "$ROUNDS"); do
  [ "$PREDICT_ONLY" = 1 ] && break
  echo "== round $k of $ROUNDS" >&2
  i=0
  while read -r name dp tp pp v zero sp rc R cp; do
    i=$((i + 1))
    D=$OUT/layouts/$name
    rm -rf "$D/round-$k"
    read -r bgc el < <(train_layout "$D/round-$k")
    echo "$bgc" > "$D/round-$k/background_cores"
    now=$(median_step "$D/round-$k") kept=$(median_step "$D")
    echo "${now:-nan}" >> "$D/round_steps"
    printf "  [%2d/%d] %-44s %5.1f s  background %.2f cores  %s\n" "$i" "$N" "$name" "$el" "$bgc" \
      "$([ -n "$now" ] && printf "%.1f ms/step (kept %s)" "$($PY -c "print($now * 1e3)")" \
        "$([ -n "$kept" ] && printf "%.1f" "$($PY -c "print($kept * 1e3)")" || echo none)" || echo failed)" >&2
    [ -n "$now" ] || continue
    if [ -z "$kept" ] || $PY -c "import sys; sys.exit(0 if $now < $kept else 1)"; then
      for f in train time train.log background_cores; do
        [ -e "$D/$f" ] && mv "$D/$f" "$D/round-$k/$f.slower"
        mv "$D/round-$k/$f" "$D/$f"
        [ -e "$D/round-$k/$f.slower" ] && mv "$D/round-$k/$f.slower" "$D/round-$k/$f"
      done
      # the prediction at the kept run's CPU share
      plan="dp=$dp,tp=$tp,pp=$pp,v=$v,mb=$MB,zero=$zero,recompute=$rc,sp=$sp,cp=$cp"
      if [ "$R" -gt 1 ]; then BG=$BUSY_GEMM BB=$BUSY_BW; else BG=1 BB=1; fi
      bshare=$($PY -c "b=float('$bgc'); print(min(1.0, $CORES / ($R + (0 if b != b else b))))")
      rm -rf "$D/bg" "$D/pred_bg.json"
      predict "$bshare" "$D/bg" "$D/pred_bg.json" --log-level error > /dev/null 2>&1 || true
    fi
  done < "$OUT/layouts.txt"
done

# Learning the site: cairn-plan calibrate --from-runs on the runs of LEARN_R ranks (the largest rank count that is not
# oversubscribed), priced as those layouts were (their CPU share, contention factor and sweep); then every layout
# priced again with the refitted cluster file in place of cpu1.toml (DIR/learned*/, pred_learned*.json). The other
# rank counts' layouts are held out of the fit.
LEARN_R=""
if [ "${LEARN:-1}" = 1 ]; then
  for r in $RANKS; do [ "$r" -ge 2 ] && [ "$r" -le "$CORES" ] && LEARN_R=$r; done
fi
if [ -n "$LEARN_R" ]; then
  mapfile -t FIT_RUNS < <(awk -v r="$LEARN_R" -v o="$OUT" '$9 == r {print o "/layouts/" $1}' "$OUT/layouts.txt")
  rm -rf "$OUT/learn"; mkdir -p "$OUT/learn"
  R=$LEARN_R BG=$BUSY_GEMM BB=$BUSY_BW
  site_args "$($PY -c "print(min(1.0, $CORES / $LEARN_R))")"
  if [ ${#FIT_RUNS[@]} -eq 0 ]; then
    echo "learn: no layout of $LEARN_R ranks trained (FILTER?); no learned prediction" >&2
    LEARN_R=""
  elif "$BIN/cairn-plan" calibrate --from-runs "${FIT_RUNS[@]}" "${SITE_ARGS[@]}" "${PLAN_EXTRA[@]}" --out "$OUT/learn" \
      --output "$OUT/learn/cluster-refit.toml" --json "$OUT/learn/refit.json" --log-level error \
      > "$OUT/learn/refit.txt" 2> "$OUT/learn/refit.err"; then
    # The refit scales attention_efficiency with the other device efficiencies; PLAN_SETS would set the measured one.
    LEARNED_ATT=$($PY -c "import tomllib,sys; print(tomllib.load(open(sys.argv[1],'rb'))['cluster']['attention_efficiency'])" \
      "$OUT/learn/cluster-refit.toml")
    echo "learned from the ${#FIT_RUNS[@]} layouts of $LEARN_R ranks: $(grep -E '^  (compute|attention|memory|intra): x' "$OUT/learn/refit.txt" | \
      sed -E 's/^  ([a-z]+): (x[0-9.]+).*/\1 \2/' | paste -sd, -)" >&2
    while read -r name dp tp pp v zero sp rc R cp; do
      D=$OUT/layouts/$name
      plan="dp=$dp,tp=$tp,pp=$pp,v=$v,mb=$MB,zero=$zero,recompute=$rc,sp=$sp,cp=$cp"
      if [ "$R" -gt 1 ]; then BG=$BUSY_GEMM BB=$BUSY_BW; else BG=1 BB=1; fi
      rm -rf "$D/learned" "$D/learned_full" "$D"/pred_learned*.json
      CLUSTER_FILE=$OUT/learn/cluster-refit.toml predict "$($PY -c "print(min(1.0, $CORES / $R))")" "$D/learned" \
        "$D/pred_learned.json" --set "cluster.attention_efficiency=$LEARNED_ATT" --log-level error > /dev/null 2>&1 || true
      if [ "$R" -gt "$CORES" ]; then
        CLUSTER_FILE=$OUT/learn/cluster-refit.toml predict 1 "$D/learned_full" "$D/pred_learned_full.json" \
          --set "cluster.attention_efficiency=$LEARNED_ATT" --log-level error > /dev/null 2>&1 || true
      fi
    done < "$OUT/layouts.txt"
  else
    echo "learn: cairn-plan calibrate --from-runs failed (see $OUT/learn/refit.err); no learned prediction" >&2
    LEARN_R=""
  fi
fi

LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
GIT=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
DIRTY=$(git -C "$ROOT" status --porcelain 2>/dev/null | grep -q . && echo true || echo false)
VER=$("$BIN/cairn-plan" --version 2>/dev/null | awk '{print $2}' | head -1)
$PY - "$OUT" "$WARMUP" "$TARGET" "$CORES" "$GIT" "$DIRTY" "$VER" "$LOAD0" "$LOAD1" "$(( $(date +%s) - T0 ))" \
  "$0 $*" "$L $H $A $S $GB $MB $STEPS" "$CP_COMM" "$ROUNDS" "$BUSY" "$LEARN_R" <<'PY'
import json, os, socket, statistics, sys, datetime
out, warm, target, cores = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
git, dirty, ver, load0, load1, secs, cmd = sys.argv[5], sys.argv[6] == "true", sys.argv[7], sys.argv[8], sys.argv[9], int(sys.argv[10]), sys.argv[11]
l, h, a, s, gb, mb, steps = map(int, sys.argv[12].split())
cp_comm, rounds, contention = sys.argv[13], int(sys.argv[14]), float(sys.argv[15])
learn_r = int(sys.argv[16]) if sys.argv[16] else None
def plan_step(pred, full):
    """The prediction of a layout from its pred.json; oversubscribed (full: the plan at a whole core per rank), the
    bubble is another rank's compute time: dropped, bounded below by the full-core plan."""
    p = json.load(open(pred))["plans"][0]
    if full and os.path.exists(full):
        return p, max(p["step_time_s"] - p["breakdown"]["time_s"]["bubble"], json.load(open(full))["plans"][0]["step_time_s"])
    return p, p["step_time_s"]
rows = []
for line in open(f"{out}/layouts.txt"):
    name, dp, tp, pp, v, zero, sp, rc, R, cp = line.split()
    d = f"{out}/layouts/{name}"
    row = {"layout": f"dp={dp},tp={tp},pp={pp},v={v},mb={mb},zero={zero},recompute={rc},sp={sp}" + (f",cp={cp},cp_comm={cp_comm}" if int(cp) > 1 else ""),
           "dir": f"layouts/{name}", "cp": int(cp),
           "ranks": int(R), "dp": int(dp), "tp": int(tp), "pp": int(pp), "v": int(v), "zero": int(zero), "sp": sp,
           "recompute": rc, "predicted_step_s": None, "measured_step_s": None, "step_error_pct": None,
           "predicted_mem_gib": None, "measured_mem_gib": None, "mem_error_pct": None}
    try:
        p, row["predicted_step_s"] = plan_step(f"{d}/pred.json", f"{d}/pred_full.json" if int(R) > cores else None)
        if row["predicted_step_s"] != p["step_time_s"]: row["predicted_plan_step_s"] = p["step_time_s"]
        row["predicted_mem_gib"] = p["memory_gib"]
        row["predicted_time_s"] = p["breakdown"]["time_s"]
        row["predicted_memory_gib"] = p["breakdown"]["memory_gib"]
    except Exception as e:
        row["error"] = f"plan: {e}"
    try:
        tr = [json.loads(x) for x in open(f"{d}/train/metrics.jsonl") if '"train"' in x]
        steady = tr[warm:] or tr
        row["measured_step_s"] = statistics.median(r["time_s"]["total"] for r in steady)
        row["measured_mem_gib"] = max(r["mem_gib"] for r in tr)
        # The phases of the critical pipeline stage (each step's stage with the most compute, as calibrate
        # --from-runs reads it), else rank 0's.
        busy = lambda t: t["forward"] + t["backward"] - t.get("tp_comm", 0) - t.get("cp_comm", 0) - t.get("zero_comm", 0)
        split = [max((st["time_s"] for st in r["stages"]), key=busy) if r.get("stages") else r["time_s"] for r in steady]
        row["measured_time_s"] = {k: statistics.median(t.get(k, 0.0) for t in split)
                                  for k in ("forward", "backward", "comm", "optimizer", "tp_comm", "cp_comm", "zero_comm", "pp_wait", "data")}
        row["measured_steps"] = len(steady)
        row["measured_min_step_s"] = min(r["time_s"]["total"] for r in steady)
        row["background_cores"] = float(open(f"{d}/background_cores").read())  # nan: the run failed
        if os.path.exists(f"{d}/round_steps"):  # every round's median step (the fastest is measured_step_s)
            rs = [float(x) for x in open(f"{d}/round_steps").read().split()]
            ok = [x for x in rs if x == x]
            row["measured_round_steps_s"] = [x if x == x else None for x in rs]
            row["round_spread_pct"] = 100 * (max(ok) - min(ok)) / min(ok) if ok else None
        row["predicted_step_at_background_s"] = json.load(open(f"{d}/pred_bg.json"))["plans"][0]["step_time_s"]
    except Exception as e:
        row.setdefault("error", f"train: {e}")
    if row["predicted_step_s"] and row["measured_step_s"]:
        row["step_error_pct"] = 100 * (row["predicted_step_s"] - row["measured_step_s"]) / row["measured_step_s"]
    if row["predicted_mem_gib"] and row["measured_mem_gib"]:
        row["mem_error_pct"] = 100 * (row["predicted_mem_gib"] - row["measured_mem_gib"]) / row["measured_mem_gib"]
    if learn_r:
        row["learned_held_out"] = int(R) != learn_r
        try:
            _, row["learned_step_s"] = plan_step(f"{d}/pred_learned.json", f"{d}/pred_learned_full.json" if int(R) > cores else None)
            if row["measured_step_s"]:
                row["learned_step_error_pct"] = 100 * (row["learned_step_s"] - row["measured_step_s"]) / row["measured_step_s"]
        except Exception as e:
            row["learned_error"] = f"plan: {e}"
    rows.append(row)

def stats(key, sel=lambda r: True):
    v = [abs(r[key]) for r in rows if sel(r) and r.get(key) is not None]
    return {"mean_abs_pct": statistics.mean(v) if v else None, "max_abs_pct": max(v) if v else None,
            "within_target": sum(x <= target for x in v), "n": len(v)}
summary = {"step": stats("step_error_pct"), "memory": stats("mem_error_pct"), "target_pct": target}
if learn_r:
    refit = json.load(open(f"{out}/learn/refit.json"))
    summary["learned"] = {
        "fit_on": f"the {sum(not r['learned_held_out'] for r in rows)} layouts of {learn_r} ranks",
        "factors": {k: v["factor"] for k, v in refit["factors"].items() if v["exercised"] and v["adjustable"]},
        "fit_leave_one_out": refit["summary"],
        "gemm_shapes": len(refit.get("gemm_shapes") or []),  # GEMM table entries learned at the runs' shapes
        "step_held_out": stats("learned_step_error_pct", lambda r: r["learned_held_out"]),
        "step_held_out_shipped_model": stats("step_error_pct", lambda r: r["learned_held_out"]),
        "step_all": stats("learned_step_error_pct")}
fmt = lambda x, f: "-" if x is None else format(x, f)
hdr = f"{'layout':<59} {'ranks':>5} {'pred s':>8} {'meas s':>8} {'err %':>7} {'pred MiB':>9} {'meas MiB':>9} {'err %':>7} {'bg':>5} {'min s':>7} {'pred@bg':>7} {'rounds%':>7}"
print(hdr); print("-" * len(hdr))
for r in rows:
    pm = None if r["predicted_mem_gib"] is None else r["predicted_mem_gib"] * 1024
    mm = None if r["measured_mem_gib"] is None else r["measured_mem_gib"] * 1024
    print(f"{r['layout']:<59} {r['ranks']:>5} {fmt(r['predicted_step_s'], '8.4f')} {fmt(r['measured_step_s'], '8.4f')} "
          f"{fmt(r['step_error_pct'], '+7.1f')} {fmt(pm, '9.2f')} {fmt(mm, '9.2f')} {fmt(r['mem_error_pct'], '+7.1f')} {fmt(r.get('background_cores'), '5.2f')} {fmt(r.get('measured_min_step_s'), '7.4f')} {fmt(r.get('predicted_step_at_background_s'), '7.4f')} {fmt(r.get('round_spread_pct'), '7.1f')}"
          + (f"  ({r['error']})" if "error" in r else ""))
for k, lab in (("step", "step time"), ("memory", "memory")):
    st = summary[k]
    if st["n"]:
        print(f"{lab}: mean |error| {st['mean_abs_pct']:.1f} %, max {st['max_abs_pct']:.1f} %, "
              f"{st['within_target']}/{st['n']} within {target:g} %")
if learn_r:
    lr = summary["learned"]
    for k, lab in (("step_held_out_shipped_model", "held-out layouts, model as calibrated"),
                   ("step_held_out", "held-out layouts, learned from the runs"), ("step_all", "every layout, learned")):
        st = lr[k]
        if st["n"]:
            print(f"step time, {lab}: mean |error| {st['mean_abs_pct']:.1f} %, max {st['max_abs_pct']:.1f} %, "
                  f"{st['within_target']}/{st['n']} within {target:g} %")
    print(f"learned from {lr['fit_on']}: " + ", ".join(f"{k} x{v:.3g}" for k, v in lr["factors"].items())
          + (f"; GEMM table at {lr['gemm_shapes']} shapes" if lr["gemm_shapes"] else ""))
doc = {
    "kind": "layout_predict",
    "provenance": {"tool": "bench/layout_predict.sh", "version": ver, "git_sha": git, "git_dirty": dirty,
                   "host": socket.gethostname(), "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "command_line": cmd, "cores": cores, "loadavg_before": load0, "loadavg_after": load1, "seconds": secs},
    "model": {"layers": l, "hidden": h, "heads": a, "seq_len": s, "vocab": 320, "global_batch": gb, "micro_batch": mb},
    "method": {"steps": steps, "warmup_steps": warm, "threads_per_rank": 1,
               "measured_step": "median time_s.total after the warm-up steps (rank 0), of the fastest of the rounds",
               "rounds": rounds,
               "measured_mem": "max mem_gib over steps (the most any rank holds: params, grads, optimizer, activations)",
               "prediction": "cairn-plan --explain --plan <layout>, calibrated cluster (1 thread), peak/bandwidth x min(1, cores/ranks), fabric from an R-rank cairn-sweep per rank count R, reserved_gib 0, plan.flash_attention=true",
               "calibration": "cpu1.toml (solo, core 0; the 1-rank layout runs there too); ranks of 2+ rank layouts at the pace of the slowest of CORES pinned copies of the 1-rank layout run at once, the median over CONTENTION_PAIRS solo/all-cores pairs (contention/)",
               "contention_factor": contention,
               "fabric": "sweep-<R>/sweep/fabric.toml",
               "learned": "cairn-plan calibrate --from-runs on the layouts of the largest rank count that is not oversubscribed "
                          "(learn/cluster-refit.toml), every layout priced again with it: learned_step_s; the other rank counts "
                          "are held out of that fit" if learn_r else None},
    "summary": summary, "rows": rows}
tmp = f"{out}/layout_predict.json.tmp"
json.dump(doc, open(tmp, "w"), indent=1)
os.replace(tmp, f"{out}/layout_predict.json")
print(f"wrote {out}/layout_predict.json ({secs} s; load {load0} -> {load1})", file=sys.stderr)
PY
