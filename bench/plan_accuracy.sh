#!/usr/bin/env bash
# Predicted vs published training throughput (125 runs, A100, H100 and H200, 760M-1T, FSDP/ZeRO-3, TP, PP, CP): runs
# bench/plan_accuracy.py, which holds every row with its citation, alternates fit and held-out rows, and prints
# mean and max error per half. `--fit` searches the model's global constants on the fit half only.
set -euo pipefail
exec /usr/bin/python3 "$(dirname "$0")/plan_accuracy.py" --bin "${CAIRN_BIN_DIR:-build/bin}" "$@"
