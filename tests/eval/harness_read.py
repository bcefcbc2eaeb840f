#!/usr/bin/env python3
"""Reads cairn-eval's lm-evaluation-harness files the way the harness does (lm-evaluation-harness is not
installed here, so its reading rules are re-implemented from its source, EleutherAI/lm-evaluation-harness):

- lm_eval/utils.py get_results_filenames / get_sample_results_filenames / get_file_datetime /
  get_file_task_name / get_latest_filename / sanitize_model_name / sanitize_task_name / hash_string,
- lm_eval/loggers/evaluation_tracker.py save_results_aggregated (results_<date_id>.json under
  <output_path>/<model_name_sanitized>/, date_id = datetime.now().isoformat().replace(":", "-"), task_hashes) and
  save_results_samples (samples_<task>_<date_id>.jsonl, arguments as gen_args_i/arg_j, sanitize_list),
- lm_eval/evaluator.py simple_evaluate (config, git_hash, date = time.time(), add_env_info) and evaluate's logged
  samples (doc_id, doc, target, arguments, resps, filtered_resps, filter, metrics, doc_hash, prompt_hash,
  target_hash, then process_results' metrics),
- lm_eval/evaluator_utils.py _collect_results (name, alias, sample_len, "<m>,<filter>", "<m>_stderr,<filter>",
  n-samples original/effective, configs/versions/n-shot/higher_is_better sorted by task),
- lm_eval/utils.py make_table (the markdown rows: alias, version, filter, n-shot, metric, arrow, value, stderr).

usage: harness_read.py OUTPUT_PATH [--expect-tasks a,b] [--limit-task NAME:ORIGINAL:EFFECTIVE ...]
Prints the make_table rows of the latest results file of every model found; exits non-zero on a violation.
"""
import datetime
import glob
import hashlib
import json
import math
import os
import re
import sys

HIGHER_IS_BETTER_SYMBOLS = {True: "↑", False: "↓"}  # lm_eval/utils.py


# ---- lm_eval/utils.py
def hash_string(s):
    return hashlib.sha256(s.encode("utf-8")).hexdigest()


def get_file_task_name(filename):
    return filename[filename.find("_") + 1 : filename.rfind("_")]


def get_file_datetime(filename):
    return filename[filename.rfind("_") + 1 :].replace(".jsonl", "")


def sanitize_model_name(model_name):
    return re.sub(r"[\"<>:/|\\?*\[\]]+", "__", model_name)


def sanitize_task_name(task_name):
    return re.sub(r"\W", "_", task_name)


def get_latest_filename(filenames):
    return max(filenames, key=lambda f: get_file_datetime(f))


def get_results_filenames(filenames):
    return [f for f in filenames if "/results_" in f and ".json" in f]


def get_sample_results_filenames(filenames):
    return [f for f in filenames if "/samples_" in f and ".json" in f]


def make_table(result_dict, column="results"):
    """make_table's rows (the markdown writer left out); order: group_subtasks hierarchy, then sorted keys."""
    group_subtasks = result_dict.get("group_subtasks", {})
    keys = [k for k in sorted(group_subtasks) if k in result_dict[column]]
    keys += [k for k in sorted(result_dict[column]) if k not in keys]
    values = []
    for k in keys:
        dic = dict(result_dict[column][k])
        version = result_dict["versions"].get(k, "    N/A")
        n = str(result_dict.get("n-shot", " ").get(k, " "))
        higher_is_better = result_dict.get("higher_is_better", {}).get(k, {})
        display = dic.pop("alias", k)
        dic.pop("name", None)
        dic.pop("sample_len", None)
        dic.pop("sample_count", None)
        k = display
        for mf, v in sorted(dic.items()):
            m, _, f = mf.partition(",")
            if m.endswith("_stderr"):
                continue
            hib = HIGHER_IS_BETTER_SYMBOLS.get(higher_is_better.get(m), "")
            v = f"{v:.4f}" if isinstance(v, float) else v
            if m + "_stderr" + "," + f in dic:
                se = dic[m + "_stderr" + "," + f]
                se = "   N/A" if se == "N/A" else f"{se:.4f}"  # a number or "N/A", nothing else
                values.append([k, version, f, n, m, hib, v, "±", se])
            else:
                values.append([k, version, f, n, m, hib, v, "", ""])
            k = ""
            version = ""
    return values


# lm_eval/api/metrics.py aggregations (weighted_mean is its helper, used for cairn's loss and token accuracy).
def weighted_mean(items):
    a, b = zip(*items)
    return sum(a) / sum(b)


AGGREGATIONS = {
    "mean": lambda arr: sum(arr) / len(arr),
    "weighted_mean": weighted_mean,
    "weighted_perplexity": lambda items: math.exp(-weighted_mean(items)),
    "bits_per_byte": lambda items: -weighted_mean(items) / math.log(2),
}


def fail(msg):
    sys.exit("harness_read: " + msg)


def check(cond, msg):
    if not cond:
        fail(msg)


def main():
    out = sys.argv[1]
    expect_tasks, limits = None, {}
    args = sys.argv[2:]
    while args:
        a = args.pop(0)
        if a == "--expect-tasks":
            expect_tasks = set(args.pop(0).split(","))
        elif a == "--limit-task":
            name, orig, eff = args.pop(0).split(":")
            limits[name] = (int(orig), int(eff))
    # The harness lists its output files recursively (recreate_metadata_card lists the repo's files).
    files = sorted(glob.glob(os.path.join(out, "**", "*.json*"), recursive=True))
    results_files = get_results_filenames(files)
    sample_files = get_sample_results_filenames(files)
    check(results_files, f"get_results_filenames found no results file under {out}: {files}")
    by_model = {}
    for f in results_files:
        by_model.setdefault(os.path.dirname(f), []).append(f)
    for model_dir, fs in sorted(by_model.items()):
        latest = get_latest_filename(fs)
        date_id = get_file_datetime(os.path.basename(latest)).replace(".json", "")
        # datetime.now().isoformat().replace(":", "-") round-trips through fromisoformat once ":" is restored.
        d, t = date_id.split("T")
        datetime.datetime.fromisoformat(d + "T" + t.replace("-", ":"))
        r = json.load(open(latest, encoding="utf-8"))
        for key in ["results", "group_subtasks", "configs", "versions", "n-shot", "higher_is_better", "n-samples",
                    "config", "git_hash", "date", "pretty_env_info", "transformers_version", "lm_eval_version",
                    "upper_git_hash", "task_hashes", "model_source", "model_name", "model_name_sanitized",
                    "system_instruction", "system_instruction_sha", "fewshot_as_multiturn", "chat_template",
                    "chat_template_sha", "start_time", "end_time", "total_evaluation_time_seconds"]:
            check(key in r, f"{latest}: no top-level {key!r}")
        check(isinstance(r["date"], float), f"{latest}: date is not a float (time.time()): {r['date']!r}")
        check(isinstance(r["total_evaluation_time_seconds"], str), "total_evaluation_time_seconds is str(float)")
        float(r["total_evaluation_time_seconds"])
        check(r["end_time"] >= r["start_time"], "end_time < start_time")
        check(r["lm_eval_version"].startswith("cairn-eval "), r["lm_eval_version"])
        # save_results_aggregated: <output_path>/<model_name_sanitized>/results_<date_id>.json
        check(os.path.basename(model_dir) == r["model_name_sanitized"] == sanitize_model_name(r["model_name"]),
              f"{latest}: not under <output_path>/sanitize_model_name(model_name)")
        # GeneralConfigTracker._get_model_name: the value after "pretrained=" in model_args.
        check(r["config"]["model_args"].split("pretrained=")[1].split(",")[0] == r["model_name"], "model_args")
        # The harness's default, under which its stderr for mean metrics is the closed form given here (0: none).
        check(r["config"]["bootstrap_iters"] == 100000, f"bootstrap_iters {r['config']['bootstrap_iters']}")
        tasks = set(r["results"])
        if expect_tasks is not None:
            check(tasks == expect_tasks, f"{latest}: tasks {sorted(tasks)} != {sorted(expect_tasks)}")
        for key in ["configs", "versions", "n-shot", "higher_is_better"]:
            check(list(r[key]) == sorted(r[key]), f"{key} not sorted by task (EvalAcc._to_eval_results)")
            check(set(r[key]) == tasks, f"{key} tasks differ from results")
        for task, res in r["results"].items():
            check(res["name"] == task and "alias" in res, f"{task}: name/alias")
            check(isinstance(res["sample_len"], int), f"{task}: sample_len")
            ns = r["n-samples"][task]
            check(ns["effective"] == res["sample_len"], f"{task}: n-samples.effective != sample_len")
            check(ns["original"] >= ns["effective"], f"{task}: original < effective")
            if task in limits:
                check((ns["original"], ns["effective"]) == limits[task], f"{task}: n-samples {ns} != {limits[task]}")
            cfg = r["configs"][task]
            check(cfg["num_fewshot"] == r["n-shot"][task] == 0, f"{task}: num_fewshot")
            metrics = {k.partition(",")[0] for k in res if "," in k and not k.partition(",")[0].endswith("_stderr")}
            check("tokens" not in metrics, f"{task}: 'tokens' is a count, not a metric")
            ml = {m["metric"]: m for m in cfg["metric_list"]}
            check(set(ml) == metrics == set(r["higher_is_better"][task]), f"{task}: metric_list {sorted(ml)} vs {sorted(metrics)}")
            for m in metrics:
                check(ml[m]["higher_is_better"] == r["higher_is_better"][task][m], f"{task}/{m}: higher_is_better")
                check(isinstance(ml[m]["aggregation"], str), f"{task}/{m}: aggregation")
                se = res[f"{m}_stderr,none"]
                check(se == "N/A" or isinstance(se, float), f"{task}/{m}: stderr {se!r}")
        rows = make_table(r)
        check(len(rows) == sum(len([k for k in v if "," in k and "_stderr," not in k]) for v in r["results"].values()),
              "make_table rows")
        for row in rows:
            check(row[5] in ("↑", "↓"), f"no higher_is_better arrow in {row}")
            check(re.fullmatch(r"-?\d+\.\d{4}", row[6]) is not None, f"value not a float in {row}")
        print(f"{os.path.relpath(latest, out)}: {len(rows)} make_table rows")
        for row in rows:
            print("| " + " | ".join(str(c) for c in row) + " |")
        # Samples of this run: samples_<task>_<date_id>.jsonl beside it, with the same date_id.
        mine = [f for f in sample_files if os.path.dirname(f) == model_dir and get_file_datetime(f) == date_id]
        hashes = {}
        for f in mine:
            task = get_file_task_name(os.path.basename(f))
            check(task in tasks, f"{f}: task {task!r} not in the results")
            lines = [json.loads(l) for l in open(f, encoding="utf-8")]
            check(len(lines) == r["n-samples"][task]["effective"], f"{f}: {len(lines)} samples")
            for s in lines:
                for key in ["doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics",
                            "doc_hash", "prompt_hash", "target_hash"]:
                    check(key in s, f"{f}: sample lacks {key!r}")
                check(isinstance(s["target"], str), "target is str(target)")
                args = s["arguments"]
                check(list(args) == [f"gen_args_{i}" for i in range(len(args))], "arguments keys")
                check(len(s["resps"]) == len(s["filtered_resps"]) == len(args), "one resp per request")
                for a, resp, fr in zip(args.values(), s["resps"], s["filtered_resps"]):
                    check(list(a) == [f"arg_{j}" for j in range(len(a))], "gen_args keys")
                    check(resp == [fr], "resps = [filtered_resps] (take_first)")
                    # loglikelihood_rolling (one argument) answers one float per request; loglikelihood (context,
                    # continuation) a (loglikelihood, is_greedy) pair.
                    check(isinstance(fr, str) if len(a) == 1 else isinstance(fr, list) and len(fr) == 2,
                          f"{f}: a response of {len(a)}-argument request shaped {fr!r}")
                    flat = fr if isinstance(fr, list) else [fr]
                    check(all(isinstance(x, str) for x in flat), "sanitize_list: strings")
                    float(flat[0])
                check(s["doc_hash"] == hash_string(json.dumps(s["doc"], indent=2, ensure_ascii=False)), "doc_hash")
                check(s["prompt_hash"] == hash_string(args["gen_args_0"]["arg_0"]), "prompt_hash")
                check(s["target_hash"] == hash_string(s["target"]), "target_hash")
                for m in s["metrics"]:
                    check(m in s, f"metric {m} value missing")
                check(set(s["metrics"]) == set(r["higher_is_better"][task]), f"{f}: sample metrics")
            # The task's values are the configured aggregations of the samples' per-example items.
            for m in lines[0]["metrics"]:
                agg = r["configs"][task]["metric_list"]
                agg = [x["aggregation"] for x in agg if x["metric"] == m][0]
                got = AGGREGATIONS[agg]([tuple(s[m]) if isinstance(s[m], list) else s[m] for s in lines])
                want = r["results"][task][f"{m},none"]
                check(abs(got - want) <= 1e-9 * max(1.0, abs(want)), f"{task}/{m}: {agg} of the samples {got} != {want}")
            hashes[task] = hash_string("".join(s["doc_hash"] + s["prompt_hash"] + s["target_hash"] for s in lines))
            print(f"{os.path.relpath(f, out)}: {len(lines)} samples, hashes verified")
        for task, h in hashes.items():
            check(r["task_hashes"].get(task) == h, f"task_hashes[{task}] != the samples' hash")
    print("harness_read: OK")


if __name__ == "__main__":
    main()
