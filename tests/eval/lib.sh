# Shared setup of cairn-eval's script tests: a real fortunes dataset and a tiny trained run.
set -euo pipefail
BIN=${CAIRN_BIN_DIR:-build/bin}
SRC=${CAIRN_SOURCE_DIR:-$(pwd)}
PY=/usr/bin/python3   # Debian's python (h5py, torch)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
WORK=$(mktemp -d /tmp/cairn-eval-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# make_dataset DIR: fortunes text (bytes tokenizer), 2 shards.
make_dataset() {
  "$BIN/cairn-reshard" build /usr/share/games/fortunes/fortunes /usr/share/games/fortunes/computers \
    --delimiter % --shards 2 --out "$1" --log-level warn
}

# write_train_config FILE RUN STEPS CKPT_EVERY: a 2-layer model small enough to train in seconds.
write_train_config() {
  cat > "$1" <<TOML
[run]
dir = "$2"
[model]
layers = 2
hidden = 64
heads = 4
seq_len = 64
[data]
path = "$WORK/data"
val_fraction = 0.05
[train]
steps = $3
global_batch = 8
micro_batch = 8
warmup = 2
lr = 1e-3
spike_zscore = 0.0
checkpoint_every = $4
keep_checkpoints = 100
val_every = $4
val_batches = 4
tensorboard = false
threads = 1
TOML
}

# write_eval_config FILE RUN: cairn-eval of RUN's checkpoints on the trainer's own validation pass (train_val).
write_eval_config() {
  cat > "$1" <<TOML
[run]
dir = "$2"
[eval]
tasks = ["train_val"]
threads = 1
TOML
}

# expect_exit CODE PATTERN cmd...: runs cmd, checks its exit code and that stderr matches PATTERN.
expect_exit() {
  local code=$1 pattern=$2
  shift 2
  set +e
  "$@" > "$WORK/out.txt" 2> "$WORK/err.txt"
  local rc=$?
  set -e
  [ "$rc" = "$code" ] || { cat "$WORK/err.txt" >&2; fail "exit $rc (want $code): $*"; }
  grep -q -- "$pattern" "$WORK/err.txt" || { cat "$WORK/err.txt" >&2; fail "stderr lacks '$pattern': $*"; }
}
