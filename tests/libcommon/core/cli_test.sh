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
check version 0 "cairn-probe 0." -- "$probe" --version
# Values other tools refused only when they used them are refused where the config loads, naming where they were set
# (cairn-plan's constraints, the cluster file's GEMM tables): --print-config passes only what would run.
check plan_dp_range 2 "--set plan.dp=-1: plan.dp: value -1 is below the minimum 1" -- "$probe" --set plan.dp=-1 --print-config
check plan_zero_range 2 "plan.zero: value 4 is above the maximum 3" -- "$probe" --set 'plan.zero=[1,4]' --print-config
check gemm_efficiency_range 2 "cluster.gemm_efficiency: value -1.0 is below the minimum" -- env CAIRN_CLUSTER_GEMM_EFFICIENCY='[-1]' "$probe" --print-config
# --out names a directory: `--out -` is refused (it created a directory named "-")
check out_dash 2 "--out: names a directory, not stdout" -- "$probe" --out -
# --print-config --json: the config as JSON (values, where each came from, positional arguments, provenance); with
# --json - the JSON alone on stdout, with --json FILE the TOML on stdout as well
"$probe" --set model.layers=3 --print-config --json - 2>/dev/null >"$tmp/pc.json"
check print_config_json 0 "3 --set model.layers=3" -- /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); \
print(d['config']['model']['layers'], d['origin']['model']['layers'], d['provenance']['tool'])" "$tmp/pc.json"
check print_config_json_file 0 "layers = 3" -- "$probe" --set model.layers=3 --print-config --json "$tmp/pc2.json"
check print_config_json_file_written 0 '"layers": 3' -- cat "$tmp/pc2.json"
check bad_flag 2 "cairn-probe: " -- "$probe" --no-such-flag
# A misspelled flag gets the closest one, as a misspelled config key does
check flag_typo 2 "not expected: --stpes (did you mean --steps?)" -- "$probe" --stpes 5
check flag_typos 2 "(did you mean --steps for --stpes, --layers for --lyers?)" -- "$probe" --stpes 5 --lyers 3
check config_typo 2 "did you mean 'model.hidden'" -- "$probe" --config "$data/typo.toml"
check missing_config 2 "cannot open config" -- "$probe" --config "$data/missing.toml"
check runtime 1 "cairn-probe: the thing broke" -- "$probe" --fail runtime
check gate 3 "cairn-probe: busbw" -- "$probe" --fail gate
check io_error 1 "cannot read \"/nonexistent/input.txt\": No such file or directory" -- "$probe" --fail io
check set_takes_one_value 0 '(not config keys: give them again with --config): ["extra"]' -- "$probe" --set model.layers=3 extra --print-config
check bad_log_level 2 "unknown log level" -- "$probe" --log-level loud
# An integer flag takes a whole number in exponent or float notation, as --set does; a fraction or a value past the
# key's range is refused naming the flag, the key and the value; a word keeps CLI11's message.
check int_flag_exponent 0 "steps = 2000 " -- "$probe" --steps 2e3 --print-config
check int_flag_float 0 "steps = 7 " -- "$probe" --steps 7.0 --print-config
check int_flag_fraction 2 "cairn-probe: --steps: train.steps: expected an integer, got number 1.5" -- "$probe" --steps 1.5
check int_flag_small 2 "--steps: train.steps: expected an integer, got number 0.001" -- "$probe" --steps 1e-3
check int_flag_range 2 "--steps: train.steps: value 1e+13 is above the maximum 1000000000000" -- "$probe" --steps 1e13
check int_flag_word 2 "Could not convert: --steps = abc" -- "$probe" --steps abc
# Past int64: named as typed (it said 9223372036854775807, CLI11's saturated value).
check int_flag_past_int64 2 "--steps: train.steps: value 1e+20 is above the maximum 1000000000000" -- \
  "$probe" --steps 99999999999999999999
check int_set_exponent 0 "steps = 30000 " -- "$probe" --set train.steps=3e4 --print-config
check int_env_exponent 0 "steps = 40000 " -- env CAIRN_TRAIN_STEPS=4e4 "$probe" --print-config
"$probe" --json "$tmp/out.json" >/dev/null 2>&1
check json_written 0 '"layers":12' -- cat "$tmp/out.json"
check json_stdout 0 '"model"' -- "$probe" --json -
# --json naming a directory, or a file whose directory cannot be made: exit 2 before any work (the probe's
# "layers" line is its work), naming the path. Likewise --out naming a regular file.
mkdir -p "$tmp/jdir"; : > "$tmp/afile"
check json_dir 2 "cairn-probe: --json: cannot write \"$tmp/jdir\": Is a directory" -- "$probe" --json "$tmp/jdir"
check json_dir_no_work 0 "" -- bash -c "! \"$probe\" --json \"$tmp/jdir\" 2>/dev/null | grep -q layers"
check json_parent_is_file 2 "\"$tmp/afile/x.json\"" -- "$probe" --json "$tmp/afile/x.json"
check json_parent_is_file_no_work 0 "" -- bash -c "! \"$probe\" --json \"$tmp/afile/x.json\" 2>/dev/null | grep -q layers"
check out_is_file 2 "cairn-probe: --out: cannot use run directory \"$tmp/afile\": Not a directory" -- "$probe" --out "$tmp/afile"
check run_dir_env_is_file 2 "env CAIRN_RUN_DIR: cannot use run directory \"$tmp/afile\"" -- env CAIRN_RUN_DIR="$tmp/afile" "$probe"
# A --json file in a directory that does not exist yet (e.g. under the run directory) is written there.
"$probe" --json "$tmp/new/sub/out.json" >/dev/null 2>&1
check json_new_dir 0 '"layers":12' -- cat "$tmp/new/sub/out.json"
# --json -: stdout is the JSON document alone; the probe's human line goes to stderr.
"$probe" --json - 2>"$tmp/human.txt" >"$tmp/stdout.json"
check json_stdout_pure 0 "" -- /usr/bin/python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$tmp/stdout.json"
check json_stdout_human_on_stderr 0 "layers 12" -- cat "$tmp/human.txt"

# --config - reads TOML from stdin, --config <(...) from a pipe; an include inside resolves relative to the
# current directory; errors name <stdin>; stdin is read once.
check config_stdin 0 "layers 5" -- bash -c "printf '[model]\nlayers = 5\n' | \"$probe\" --config -"
check config_pipe 0 "layers 4" -- bash -c "\"$probe\" --config <(printf '[model]\nlayers = 4\n')"
check config_stdin_then_file 0 "layers 6" -- bash -c "printf '[model]\nlayers = 5\n' | \"$probe\" --config - --config \"$data/experiment.toml\""
check config_stdin_include 0 "layers 2" -- bash -c "cd \"$data\" && printf 'include = [\"base.toml\"]\n' | \"$probe\" --config -"
check config_pipe_include 0 "layers 2" -- bash -c "cd \"$data\" && \"$probe\" --config <(printf 'include = [\"base.toml\"]\n')"
check config_stdin_include_cwd 2 "cannot include \"base.toml\"" -- bash -c "cd \"$tmp\" && printf 'include = [\"base.toml\"]\n' | \"$probe\" --config -"
# A symlink to a config reads the includes beside the file it points to, not files of the same name beside the link.
mkdir -p "$tmp/linkdir"
ln -sf "$data/experiment.toml" "$tmp/linkdir/experiment.toml"
printf '[model]\nlayers = 99\nheads = 99\n' > "$tmp/linkdir/base.toml"
check config_symlink_include 0 "heads = 4" -- "$probe" --config "$tmp/linkdir/experiment.toml" --print-config
# One key of a table value from the command line: merged into the table the file defines (it was "unknown section").
printf '[eval.task.mc]\nkind = "multiple_choice"\npath = "mc.jsonl"\n' > "$tmp/tasks.toml"
check set_inside_table 0 'mc = { kind = "multiple_choice", limit = 5, path = "mc.jsonl" }' -- \
  "$probe" --config "$tmp/tasks.toml" --set eval.task.mc.limit=5 --print-config
check set_inside_table_typo 2 "eval.task.mc: unknown key 'pth' (did you mean 'path'?)" -- \
  "$probe" --config "$tmp/tasks.toml" --set eval.task.mc.pth=x.jsonl
check set_inside_table_quoted 0 '"wiki.test" = { limit = 3 }' -- "$probe" --set 'eval.task."wiki.test".limit=3' --print-config
check config_stdin_error 2 "<stdin>:2:1: unknown key 'layrs' in [model]" -- bash -c "printf '[model]\nlayrs = 5\n' | \"$probe\" --config -"
check config_stdin_twice 2 "stdin can be read only once" -- bash -c "printf '' | \"$probe\" --config - --config -"
check config_stdin_origin 0 "<stdin>:2:1" -- bash -c "printf '[model]\nlayers = 5\n' | \"$probe\" --config - --print-config"

# --print-config round-trips values with a newline, tab, DEL, another control character, quotes, a
# backslash and non-ASCII text, from --set and the environment: the output is TOML (Python's tomllib reads
# the same strings) that loads back to the same config.
val=$'a\nb\tc\x7fd\x01e "q" \\ caf\xc3\xa9 \xe2\x82\xac'
"$probe" --set "run.name=$val" --print-config > "$tmp/pc.toml"
env CAIRN_REPORT_TITLE="$val" "$probe" --set "run.name=$val" --print-config > "$tmp/pc_env.toml"
check print_config_tomllib 0 "same" -- /usr/bin/python3 - "$tmp/pc.toml" "$tmp/pc_env.toml" "$val" <<'PY'
import sys, tomllib
want = sys.argv[3].encode("utf-8", "surrogateescape").decode("utf-8")
a = tomllib.load(open(sys.argv[1], "rb"))
b = tomllib.load(open(sys.argv[2], "rb"))
assert a["run"]["name"] == want, (a["run"]["name"], want)
assert b["run"]["name"] == want and b["report"]["title"] == want, b["report"]
print("same")
PY
"$probe" --set "run.name=$val" --json - > "$tmp/direct.json" 2>/dev/null
"$probe" --config "$tmp/pc.toml" --json - > "$tmp/reloaded.json" 2>/dev/null
check print_config_reloads 0 "" -- cmp "$tmp/direct.json" "$tmp/reloaded.json"
env CAIRN_REPORT_TITLE="$val" "$probe" --set "run.name=$val" --json - > "$tmp/direct_env.json" 2>/dev/null
"$probe" --config "$tmp/pc_env.toml" --json - > "$tmp/reloaded_env.json" 2>/dev/null
check print_config_reloads_env 0 "" -- cmp "$tmp/direct_env.json" "$tmp/reloaded_env.json"
# A tool's positional arguments are not config keys: --print-config shows them on a comment line at the top, as a TOML
# array, escaped so that the output stays TOML (a newline is \n, a byte that is not UTF-8 \xff); it loads back.
"$probe" --print-config runs/a "b c" $'d\ne' $'f\xff' 'q"uote' > "$tmp/pc_pos.toml"
check print_config_positional 0 '# positional arguments (not config keys: give them again with --config): ["runs/a", "b c", "d\ne", "f\xff", "q\"uote"]' -- head -2 "$tmp/pc_pos.toml"
check print_config_positional_toml 0 "same" -- /usr/bin/python3 - "$tmp/pc_pos.toml" "$tmp/pc.toml" <<'PY'
import sys, tomllib
a, b = (tomllib.load(open(p, "rb")) for p in sys.argv[1:3])
assert a["model"] == b["model"] and a["train"] == b["train"], (a, b)
print("same")
PY
check print_config_positional_reloads 0 "layers 12" -- "$probe" --config "$tmp/pc_pos.toml"
check print_config_no_positional 1 "" -- grep -q "^# positional arguments" "$tmp/pc.toml"
# A config file named with bytes that are not UTF-8 is named in the origins as \xff: the output stays TOML.
printf '[model]\nlayers = 5\n' > "$tmp/"$'\xff'".toml"
"$probe" --config "$tmp/"$'\xff'".toml" --print-config > "$tmp/pc_ff.toml"
check print_config_non_utf8_origin 0 "layers 5" -- "$probe" --config "$tmp/pc_ff.toml"
# A quoted value that is not TOML (unterminated, or a raw control character a script did not escape) is an error: it
# was taken as a bare string, quotes included, and became a directory named '"/tmp/x'.
check set_broken_quote 2 'is not valid TOML' -- "$probe" --set 'run.dir="/tmp/unterminated'
check set_raw_control_char 2 'is not valid TOML' -- "$probe" --set $'run.dir="/tmp/a\x1bb"'
check set_newline_second_value 2 "more than one TOML value" -- "$probe" --set $'model.layers=3\nhidden = 5'

# Data that never reached stdout is a failed run (exit 1), not a success; a reader that went away is not a failure.
check stdout_full 1 "cairn-probe: cannot write to stdout" -- bash -c "\"$probe\" > /dev/full"
check stdout_reader_gone 0 "" -- bash -c "\"$probe\" | true"
# Started with a standard stream closed: the data cannot reach a closed stdout (exit 1), "-" on a closed stdin is a
# usage error; neither ends up in a file the tool opens (it would get the lowest free descriptor).
check stdout_closed 1 "cairn-probe: cannot write to stdout: it is closed" -- bash -c "\"$probe\" >&-"
check stdout_closed_json 1 "cannot write to stdout: it is closed" -- bash -c "\"$probe\" --json - >&-"
check stdin_closed_config 2 'cannot read config from stdin: "-" reads standard input, which is closed' -- \
  bash -c "\"$probe\" --config - <&-"
check stderr_closed 0 "layers 12" -- bash -c "\"$probe\" 2>&-"
# A run directory on a read-only mount: exit 2 before any work, naming it.
mkdir -p "$tmp/ro"
if mount -t tmpfs -o ro tmpfs "$tmp/ro" 2>/dev/null; then
  check out_read_only 2 "--out: cannot use run directory \"$tmp/ro/run\": \"$tmp/ro\" is on a read-only file system" -- \
    "$probe" --out "$tmp/ro/run"
  umount "$tmp/ro"
else
  echo "out_read_only: cannot mount a read-only tmpfs here (not root?): checked by the unwritable case only"
  chmod 500 "$tmp/ro"
  if ! touch "$tmp/ro/x" 2>/dev/null; then check out_unwritable 2 "cannot write in \"$tmp/ro\"" -- "$probe" --out "$tmp/ro/run"; fi
fi

# Shell shorthand in a config's [run] dir is not expanded: "~/x" is refused (it made a directory named "~"), "$X/y"
# warned about.
printf '[run]\ndir = "~/runs/x"\n' > "$tmp/tilde.toml"
check run_dir_tilde 2 'starts with ~, which only a shell expands' -- "$probe" --config "$tmp/tilde.toml"
# ... and so is a quoted ~ on the command line or in the environment (each made ./~/x/ and wrote there).
check run_dir_tilde_set 2 '--set run.dir="~/x": [run] dir "~/x" starts with ~' -- "$probe" --set 'run.dir="~/x"'
# shellcheck disable=SC2088 # the literal ~ is the point
check run_dir_tilde_out 2 '--out: [run] dir "~/x" starts with ~' -- "$probe" --out '~/x'
check run_dir_tilde_env 2 'env CAIRN_RUN_DIR: [run] dir "~/x" starts with ~' -- env CAIRN_RUN_DIR='~/x' "$probe"
printf '[run]\ndir = "~root/plan-x"\n' > "$tmp/tilde_user.toml"  # another user's home: made ./~root/plan-x
check run_dir_tilde_user 2 '[run] dir "~root/plan-x" starts with ~' -- "$probe" --config "$tmp/tilde_user.toml"
printf '[run]\ndir = "$SCRATCH/x"\n' > "$tmp/dollar.toml"
check run_dir_dollar 0 'holds a $: it is taken literally' -- "$probe" --config "$tmp/dollar.toml"
# Environment variables that name no key were dropped without a word; an empty one set the key silently.
check env_empty_key 2 "env CAIRN_MODEL_: no key after [model]'s prefix" -- env CAIRN_MODEL_=5 "$probe"
check env_empty_value 0 'env CAIRN_RUN_DIR is set but empty' -- env CAIRN_RUN_DIR= "$probe"
# A name component over 255 bytes: the system's reason (it was "Not a directory").
long=$(printf 'x%.0s' $(seq 1 300))
check out_name_too_long 2 ': File name too long' -- "$probe" --out "$tmp/$long/run"
check json_name_too_long 2 'File name too long' -- "$probe" --json "$tmp/$long.json"

# Exactly the data on stdout; logs on stderr.
out=$("$probe" 2>/dev/null)
if [ "$out" = "layers 12 dir runs/default" ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL stdout_clean: '$out'"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
