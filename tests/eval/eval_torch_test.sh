#!/bin/bash
# Multiple-choice log-likelihoods of cairn-eval against an independent PyTorch GPT-2 (Debian python3-torch)
# on the same trained checkpoint: every choice within 1e-4, tokenization identical to the harness's.
source "$(dirname "$0")/lib.sh"
cd "$WORK"
$PY -c "import torch, h5py" || fail "Debian python3-torch / python3-h5py missing (scripts/install-deps.sh)"
make_dataset "$WORK/data"
write_train_config train.toml "$WORK/run" 20 20
"$BIN/cairn-train" --config train.toml --log-level warn
# Held-out fortunes: the validation tail of the very dataset the model was trained on.
$PY "$SRC/tests/eval/make_fortune_mc.py" --dataset "$WORK/data" --seq-len 64 --val-fraction 0.05 --out mc.jsonl -n 12
[ "$(wc -l < mc.jsonl)" = 12 ] || fail "make_fortune_mc.py --dataset built no task"
# An empty context and a context ending in whitespace exercise the harness's pair encoding.
echo '{"context": "", "choices": ["Hello world.", "Xq zz"], "label": 0}' >> mc.jsonl
echo '{"context": "The answer is ", "choices": ["yes", "no"], "label": 1}' >> mc.jsonl
"$BIN/cairn-eval" --out "$WORK/run" "$WORK/run/train/ckpt/step_00000020" --log-samples --batch-size 3 --threads 1 \
  --tasks mc --set 'eval.task.mc={kind="multiple_choice", path="'"$WORK"'/mc.jsonl"}' --log-level warn > /dev/null
$PY "$SRC/tests/eval/torch_mc.py" run/train/ckpt/step_00000020/model.h5 run/eval/samples/step_00000020_mc.jsonl mc.jsonl
echo "eval_torch: OK"
