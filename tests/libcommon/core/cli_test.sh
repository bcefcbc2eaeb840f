#!/usr/bin/env bash
# Common CLI conventions: precedence through the real command line, --print-config, exit codes, errors.
set -u
probe="$1"
data="$CAIRN_SOURCE_DIR/tests/libcommon/core/data"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
check() {  # check NAME EXPECTED_RC EXPECTED_SUBSTRING -- command...
  local name=$1 rc_want=$2 want=$3; shift 4
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" = "$rc_want" ] && [[ "$out" == *"$want"* ]]; then pass=$((pass+1));
  else fail=$((fail+1)); echo "FAIL $name: rc=$rc (want $rc_want), output:"; echo "$out" | head -20; echo "  wanted substring: $want"; fi
}
check default 0 "layers 12" -- "$probe"
check file 0 "layers 6" -- "$probe" --config "$data/experiment.toml"
check env 0 "layers 7" -- env CAIRN_MODEL_LAYERS=7 "$probe" --config "$data/experiment.toml"
check flag_beats_env 0 "layers 9" -- env CAIRN_MODEL_LAYERS=7 "$probe" --config "$data/experiment.toml" --layers 9
check set_beats_flag 0 "layers 3" -- "$probe" --layers 9 --set model.layers=3
check out_sets_run_dir 0 "dir runs/x" -- "$probe" --out runs/x
check print_config_origin 0 "env CAIRN_MODEL_HIDDEN" -- env CAIRN_MODEL_HIDDEN=32 "$probe" --config "$data/experiment.toml" --print-config
check print_config_file_line 0 "experiment.toml:5:1" -- "$probe" --config "$data/experiment.toml" --print-config
check help 0 "--print-config" -- "$probe" --help
check version 0 "git" -- "$probe" --version
check bad_flag 2 "cairn-probe: " -- "$probe" --no-such-flag
check config_typo 2 "did you mean 'model.hidden'" -- "$probe" --config "$data/typo.toml"
check missing_config 2 "cannot open config" -- "$probe" --config "$data/missing.toml"
check runtime 1 "cairn-probe: the thing broke" -- "$probe" --fail runtime
check gate 3 "cairn-probe: busbw" -- "$probe" --fail gate
check io_error 1 "cannot read \"/nonexistent/input.txt\": No such file or directory" -- "$probe" --fail io
check set_takes_one_value 2 "The following argument was not expected: extra" -- "$probe" --set model.layers=3 extra
check bad_log_level 2 "unknown log level" -- "$probe" --log-level loud
"$probe" --json "$tmp/out.json" >/dev/null 2>&1
check json_written 0 '"layers":12' -- cat "$tmp/out.json"
check json_stdout 0 '"model"' -- "$probe" --json -
# Exactly the data on stdout; logs on stderr.
out=$("$probe" 2>/dev/null)
if [ "$out" = "layers 12 dir runs/default" ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL stdout_clean: '$out'"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
