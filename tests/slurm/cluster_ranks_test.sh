#!/usr/bin/env bash
# Node-local ranks on a 2-node Slurm: what libcommon computes (cairn/mpi.h: local rank, ranks per node, node index)
# equals Slurm's SLURM_LOCALID / SLURM_NTASKS_PER_NODE / SLURM_NODEID for every rank, as seen by a probe and by the
# tools themselves (cairn-sweep, cairn-train, cairn-eval log it with --log-level debug --log-all-ranks), and the
# GPU rule (local rank modulo visible devices, cairn/device_binding.h) picks the expected device on each node with
# fake device counts and CUDA_VISIBLE_DEVICES. Run under scripts/slurm-cluster.sh run -- with the probe's path.
set -euo pipefail
source "$(dirname "$0")/cluster_lib.sh"
probe=${1:?usage: cluster_ranks_test.sh PATH/cairn-topology-probe}
[ -x "$probe" ] || fail "no probe at $probe"

work="" ; make_workdir cluster-ranks
cd "$CAIRN_SOURCE_DIR"
config=tests/slurm/tiny.toml

# check_probe OUT LAYOUT VISIBLE_RULE: every probe line agrees with Slurm and with the device rule.
check_probe() {
  /usr/bin/python3 - "$@" <<'PY'
import re, sys
out, per_node, nodes, visible = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = [dict(kv.split("=", 1) for kv in l.split()[1:]) for l in open(out) if l.startswith("probe ")]
assert len(rows) == per_node * nodes, f"{len(rows)} probe lines for {nodes} x {per_node} ranks"
for r in sorted(rows, key=lambda r: int(r["rank"])):
    rank, local, node = int(r["rank"]), int(r["local_rank"]), int(r["node"])
    assert rank == int(r["SLURM_PROCID"]), r
    assert local == int(r["SLURM_LOCALID"]) and r["local_size"] == r["SLURM_NTASKS_PER_NODE"] == str(per_node), r
    assert node == int(r["SLURM_NODEID"]) and r["host"] == f"node{node + 1}" and int(r["nodes"]) == nodes, r
    assert int(r["visible"]) == visible and int(r["device"]) == local % visible, r
    print(f"  rank {rank}: {r['host']} local {local}/{r['local_size']} -> device {r['device']} of {visible} visible")
PY
}

probe_run() {  # probe_run NAME PER_NODE PHYSICAL [CUDA_VISIBLE_DEVICES]
  local name=$1 per=$2 phys=$3
  if [ $# -ge 4 ]; then
    CUDA_VISIBLE_DEVICES=$4 srun -N 2 --ntasks-per-node="$per" --mpi=pmix --kill-on-bad-exit=1 "$probe" "$phys" > "$work/$name.out" 2>&1
  else
    env -u CUDA_VISIBLE_DEVICES srun -N 2 --ntasks-per-node="$per" --mpi=pmix --kill-on-bad-exit=1 "$probe" "$phys" > "$work/$name.out" 2>&1
  fi || { cat "$work/$name.out" >&2; fail "probe $name failed"; }
}

probe_run all 2 4
check_probe "$work/all.out" 2 2 4 || { cat "$work/all.out"; fail "2 x 2 ranks, 4 devices per node"; }
probe_run visible 2 8 "2,3"
check_probe "$work/visible.out" 2 2 2 || { cat "$work/visible.out"; fail "2 x 2 ranks, CUDA_VISIBLE_DEVICES=2,3"; }
probe_run one_visible 2 8 "5"
check_probe "$work/one_visible.out" 2 2 1 || { cat "$work/one_visible.out"; fail "2 x 2 ranks, CUDA_VISIBLE_DEVICES=5"; }
probe_run single 1 4 "1,0"
check_probe "$work/single.out" 1 2 2 || { cat "$work/single.out"; fail "2 x 1 rank, CUDA_VISIBLE_DEVICES=1,0"; }
pass "probe: local rank, ranks per node and node equal Slurm's; device = local rank mod visible on each node"

# The tools' own view: each rank logs "topology: rank R of N on H, local rank L of S, node I of K"; a wrapper
# prints Slurm's variables from the same process first.
tool_run() {  # tool_run NAME TOOL ARGS... (ARGS first: a positional must come before --set)
  local name=$1 tool=$2; shift 2
  srun -N 2 --ntasks-per-node=2 --mpi=pmix --kill-on-bad-exit=1 bash -c \
    'echo "slurm: $SLURM_PROCID $SLURM_LOCALID $SLURM_NTASKS_PER_NODE $SLURM_NODEID $(hostname)"; exec "$@"' \
    sh "$CAIRN_BIN_DIR/cairn-$tool" "$@" --log-level debug --log-all-ranks --config "$config" \
    --set cluster.nodes=2 --set cluster.gpus_per_node=2 --set "run.dir=\"$work/run\"" --set "data.path=\"$work/data\"" \
    > "$work/$name.out" 2>&1 || { tail -n 30 "$work/$name.out" >&2; fail "cairn-$tool under srun failed"; }
  /usr/bin/python3 - "$work/$name.out" <<'PY' || { grep -E "^slurm:|topology:" "$work/$name.out"; fail "cairn-$tool: its ranks disagree with Slurm"; }
import re, sys
slurm, tool = {}, {}
for line in open(sys.argv[1]):
    if line.startswith("slurm: "):
        procid, localid, per_node, nodeid, host = line.split()[1:]
        slurm[int(procid)] = (int(localid), int(per_node), int(nodeid), host)
    m = re.search(r"topology: rank (\d+) of (\d+) on (\S+), local rank (\d+) of (\d+), node (\d+) of (\d+)", line)
    if m:
        r, n, host, local, size, node, nodes = m.groups()
        tool[int(r)] = (int(local), int(size), int(node), host)
        assert int(n) == 4 and int(nodes) == 2, line
assert sorted(slurm) == sorted(tool) == [0, 1, 2, 3], (slurm, tool)
assert slurm == tool, (slurm, tool)
PY
}
tool_run sweep sweep --maxbytes 4K --iters 2 --warmup_iters 1
"$CAIRN_BIN_DIR/cairn-reshard" --config "$config" --set "data.path=\"$work/data\"" build > "$work/reshard.out" 2>&1 \
  || { cat "$work/reshard.out"; fail "cairn-reshard failed"; }
tool_run train train --steps 2 --set train.micro_batch=2
tool_run eval eval "$work/run/train/ckpt"
pass "cairn-sweep, cairn-train, cairn-eval: each rank's local rank, ranks per node and node equal Slurm's"
