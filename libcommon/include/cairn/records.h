// Typed records of the files one cairn stage writes and another reads (metrics.jsonl lines, eval result rows,
// plans.json rows, fabric.toml fits, a checkpoint's train_state): one struct, one to_json, one from_json each.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cairn/config.h"

namespace cairn::records {

// Every from_json below reads through JsonFields, so a wrong type or range is a UsageError (exit 2):
//   malformed <kind> "<file>": key "<key>": expected <what>, got <value>
// Numbers that are not finite are written as null (JSON has no NaN) and null reads as absent.

// ---- train/metrics.jsonl ------------------------------------------------------------------------------------

// The step-time phases of a train line's "time_s" object, in seconds; the member name is the key. A new phase is
// one entry here: the trainer writes it, every reader (the report's fast scanner included) reads it.
#define CAIRN_STEP_TIME_FIELDS(X) \
  X(data) X(forward) X(backward) X(comm) X(optimizer) X(total) X(tp_comm) X(pp_wait) X(cp_comm) X(zero_comm)

// comm is data-parallel communication, tp_comm the tensor-parallel collectives, cp_comm the context-parallel ones and
// zero_comm ZeRO-2/3's waits for per-layer parameter gathers and gradient reduce-scatters (all three inside forward and
// backward, whose times include them; ZeRO's waits after the last backward are in comm), pp_wait the pipeline's waits
// for a neighbouring stage (and the tied embedding's all-reduce between the first and last stage, which waits for
// the other end's last backward).
// Read back, a phase the line lacks (files written before it existed) is NaN.
struct StepTimes {
#define CAIRN_RECORDS_TIME_MEMBER(name) double name = 0;
  CAIRN_STEP_TIME_FIELDS(CAIRN_RECORDS_TIME_MEMBER)
#undef CAIRN_RECORDS_TIME_MEMBER
  nlohmann::json to_json() const;
  static StepTimes from_json(const JsonFields& f);
};

// One pipeline stage's split of a step, as the stage's busiest rank timed it (of the stage's dp x cp x tp ranks, the
// one with the most forward + backward time): a pp > 1 train line's "stages", one entry per stage in stage order, as
// {"stage": s, "rank": r, "time_s": {...}}. Rank 0's split (time_s) is stage 0's first rank; the pipeline's critical
// stage, the one whose busy time sets the step, is found here.
struct StageTimes {
  int64_t stage = 0, rank = 0;
  StepTimes time;
  nlohmann::json to_json() const;
  static StageTimes from_json(const JsonFields& f);
};

// A phase's seconds; one the line lacks (written before it was measured, or null) counts 0.
inline double phase_seconds(double seconds) { return std::isnan(seconds) ? 0.0 : seconds; }
// A split's compute: forward + backward less the TP, CP and ZeRO collectives inside them (a phase absent counts 0).
double compute_seconds(const StepTimes& t);
// A stage's busy time as the cost model prices a stage: forward + backward with the TP and CP collectives inside
// (they occupy the stage), less only ZeRO-2/3's data-parallel waits, which the model counts apart.
double stage_busy_seconds(const StepTimes& t);
// The critical one of a train line's stages, the most compute_seconds: its index in `stages`, -1 when there are none.
int critical_stage(const std::vector<StageTimes>& stages);

// The scalar members of a metrics line as (type, name): the name is the JSON key. This list drives to_json,
// from_json and the fast scanner, so a key is spelled once. All are optional: a train line has no val_loss, a val
// line no lr, a CPU run no peak_mem_gib.
// clang-format off
#define CAIRN_METRICS_LINE_FIELDS(X) \
  X(int64_t, step) X(int64_t, tokens) X(double, loss) X(double, lr) \
  X(double, grad_norm) X(double, tokens_per_s) X(double, mfu) X(double, hfu) \
  X(double, tflops) X(bool, skipped) X(int64_t, skipped_total) X(double, mem_gib) \
  X(double, peak_mem_gib) X(double, device_mem_gib) X(double, val_loss) X(int64_t, val_first_window) \
  X(int64_t, val_windows) X(int64_t, seq_len) X(double, wall_time) X(double, peak_tflops)
// clang-format on

// One line of train/metrics.jsonl. kind "train": one optimizer step; "val": a validation pass (val_loss over the
// windows [val_first_window, +val_windows) of seq_len tokens); "provenance": who wrote the lines that follow (one
// per start and resume of cairn-train), with the peak TFLOP/s per rank that their mfu divides by.
struct MetricsLine {
  std::string kind;  // "" when the line has none
#define CAIRN_RECORDS_LINE_MEMBER(type, name) std::optional<type> name;
  CAIRN_METRICS_LINE_FIELDS(CAIRN_RECORDS_LINE_MEMBER)
#undef CAIRN_RECORDS_LINE_MEMBER
  std::optional<StepTimes> time_s;
  std::vector<StageTimes> stages;  // train lines of pipelined runs; empty otherwise (and for the fast scanner)
  nlohmann::json provenance;       // provenance lines: Provenance::to_json(); null otherwise

  nlohmann::json to_json() const;
  static MetricsLine from_json(const JsonFields& f);
  // One line of text; `where` names it in errors ("run/train/metrics.jsonl:12"). Invalid JSON is a UsageError too.
  static MetricsLine parse(std::string_view line, const std::string& where);
};

// The fast path for readers of many lines (cairn-report: 20 runs x 10^4 steps in well under 2 s): a strict,
// allocation-free JSON scanner that fills a MetricsLine straight from the text, accepting exactly the texts
// nlohmann::json accepts. Unlike from_json it is tolerant: a member whose value has another type (or a number that
// does not fit, e.g. a fractional step) reads as absent, a flag may be 0/1, and "provenance" is skipped.
enum class ScanResult { Ok, NotObject, Invalid };
ScanResult scan_metrics_line(std::string_view text, MetricsLine& out);

// ---- eval/results.jsonl -------------------------------------------------------------------------------------

// One (checkpoint, task, metric) result of cairn-eval; results.jsonl is also cairn-eval's record of what is done.
struct EvalRow {
  int64_t step = 0, tokens = 0;
  std::string checkpoint, task, metric;
  double value = 0;                                                // NaN (null in the file) when not computed
  double stderr_value = std::numeric_limits<double>::quiet_NaN();  // the key is "stderr"
  int64_t n = 0;                                                   // examples scored
  double wall_time = 0;  // unix seconds when the checkpoint's evaluation finished
  // checkpoint::checkpoint_id of what was scored: a step written again (a rollback) has another one. "" in files
  // written before it was recorded (the key is then absent).
  std::string checkpoint_id;
  // cairn-eval's fingerprint of the task's definition when it was scored (its [eval.task] table, the files it names,
  // --limit, ...): a row scored under another definition does not count as done. "" before it was recorded.
  std::string task_config;
  // Which cairn-eval invocation wrote the row: the key of its line in eval/provenance.jsonl (tool, version, git sha,
  // host, time, command line, config). "" in files written before it was recorded.
  std::string eval_run;
  // How many rows the write that recorded this row added with it (the checkpoint's rows, appended together): a record
  // cut at a line's end inside them holds fewer, which a reader tells from a whole write by this count. 0 in files
  // written before it was recorded (the key is then absent).
  int64_t rows_in_write = 0;
  // Keys this version does not know (a later cairn-eval's, read on a rollback), written back unchanged when the row
  // is rewritten: an older cairn-eval rewriting the record used to drop them from every row.
  nlohmann::json unknown_keys;

  nlohmann::json to_json() const;
  // step, task and metric are required; the rest default as above.
  static EvalRow from_json(const JsonFields& f);
  static EvalRow parse(std::string_view line, const std::string& where);
};

// One line of eval/provenance.jsonl: who wrote the results.jsonl rows whose "eval_run" is `eval_run`.
// results.jsonl stays one result per line (what jq and pandas readers expect); the provenance is kept beside it.
struct EvalProvenance {
  std::string eval_run;       // 16 hex digits: the xxh64 of the provenance's JSON text
  nlohmann::json provenance;  // Provenance::to_json()

  nlohmann::json to_json() const;
  static EvalProvenance parse(std::string_view line, const std::string& where);
};

// ---- plan/plans.json ----------------------------------------------------------------------------------------

// One evaluated layout of cairn-plan (plans.json "plans" rows; the first is the best). Files before a key existed
// read as the defaults below.
struct PlanRow {
  int64_t dp = 1, tp = 1, pp = 1, v = 1, mb = 1, cp = 1, zero = 0;
  std::string recompute;        // "none", "selective", "full" ("" when absent)
  bool sp = false;              // written "on"/"off"; true/false read too
  bool tp_overlap = false;      // likewise
  std::string cp_comm = "p2p";  // context parallelism's K/V exchange: "p2p" (ring) or "allgather"
  bool feasible = true;
  std::string reason;  // why an infeasible plan was rejected
  // Predictions (>= 0); absent or null read as not given.
  std::optional<double> step_time_s, tokens_per_s, tflops_per_gpu, hw_tflops_per_gpu, mfu, hfu, memory_gib;
  nlohmann::json breakdown;  // the cost model's itemised figures (docs/cost-model.md); kept as written

  nlohmann::json to_json() const;
  static PlanRow from_json(const JsonFields& f);
};

// ---- sweep/fabric.toml --------------------------------------------------------------------------------------

// The fitted model of one collective on one tier, [<tier>.<collective>] in fabric.toml (tier intra, inter or world):
// time(S bytes on n ranks) = alpha_us + S * busbw_factor(collective, n) / busbw_gbps.
struct FabricTier {
  double alpha_us = 0, busbw_gbps = 0;  // required: alpha_us >= 0, busbw_gbps > 0
  int64_t ranks = 2;                    // ranks of the communicator it was measured on
  // Quality of the fit and what was measured (written by cairn-sweep, not needed to plan).
  std::optional<double> r2, peak_busbw_gbps;
  std::optional<uint64_t> half_peak_bytes;
  std::optional<std::string> type, redop;

  nlohmann::json to_json() const;  // TOML-ready: non-finite numbers stay numbers (TOML has nan and inf)
  static FabricTier from_json(const JsonFields& f);
};

// The [fabric] header of fabric.toml: what was measured, where, and by whom. cairn-plan needs nodes and
// ranks_per_node (to know whether the world tier crossed nodes); the rest is provenance.
struct FabricHeader {
  std::string backend;  // "nccl" or "mpi"
  std::optional<std::string> backend_version, type;
  int64_t world_size = 1, nodes = 1;
  int64_t ranks_per_node = 0;  // 0: not known (a hand-written file)
  std::optional<bool> simulated_nodes;
  std::optional<std::string> tool, version, git_sha, host, time_utc, command_line;
  nlohmann::json sweep;  // the [sweep] settings that measured it (an object; null in files before it was recorded)
  std::vector<std::string> skipped;  // "<tier>.<collective>.<type>: why no fit"
  std::vector<std::string> notes;    // which measurement a table holds where one was measured more than once

  nlohmann::json to_json() const;
  static FabricHeader from_json(const JsonFields& f);
};

// ---- train/ckpt/step_*/DONE ---------------------------------------------------------------------------------

// The marker written last into a checkpoint directory: its presence says the checkpoint is complete, and it lists
// every file with its size and xxHash64 (16 hex digits) so a reader can check it before loading.
struct CheckpointDone {
  int64_t step = 0;
  std::optional<int64_t> world_size;  // ranks that wrote it (markers of early versions lack it)
  struct File {
    std::string name;
    uint64_t bytes = 0;
    std::string xxh64;
  };
  std::vector<File> files;  // sorted by name; never empty when read back

  nlohmann::json to_json() const;
  static CheckpointDone from_json(const JsonFields& f);  // file names must stay inside the directory
};
// The marker's name in a checkpoint directory.
inline constexpr const char* kCheckpointDoneFile = "DONE";
// The one reader of a checkpoint's marker: <dir>/DONE read and checked; std::nullopt when the directory has none (a
// write, or a prune, that was interrupted). A marker that cannot be read, is not JSON or is not a CheckpointDone
// throws, naming the file (`malformed DONE marker "<dir>/DONE": ...`): each caller decides what that means
// (checkpoint::check_dir: an incomplete checkpoint; cairn-plan calibrate --from-runs: no evidence).
std::optional<CheckpointDone> read_checkpoint_done(const std::string& dir);

// ---- train/ckpt/step_*/model.h5 attribute train_state ---------------------------------------------------------

// The integer members of train_state as (type, name); the name is the key. All optional: checkpoints written before
// a key existed lack it, and each reader chooses its fallback.
// clang-format off
#define CAIRN_TRAIN_STATE_FIELDS(X) \
  X(int64_t, step) X(int64_t, tokens) X(int64_t, batch) \
  X(int64_t, adam_step) X(int64_t, skipped_total) X(int64_t, consecutive_skips) \
  X(uint64_t, seed) X(int64_t, world_size) X(int64_t, zero) \
  X(int64_t, dp) X(int64_t, micro_batch) X(uint64_t, val_rows) \
  X(uint64_t, data_tokens) X(int64_t, global_batch) X(uint64_t, val_windows)
// clang-format on

// Where a training run is and what it was started with, so a resume continues it exactly and cairn-eval reproduces
// its validation figure: progress (step, tokens, batch = next global batch to read, adam_step), the step guard's
// skip counters and spike window, seed, world size, ZeRO stage, layout ("dp=2,tp=1,..."), data-parallel width,
// micro-batch and val_rows (windows one validation pass scores); the training data's fingerprint (16 hex digits, see
// cairn-train's data_fingerprint) and token count, so a resume on other data is caught; the global batch and the
// validation split's windows, which with the seed decide which windows each step reads.
struct TrainState {
#define CAIRN_RECORDS_STATE_MEMBER(type, name) std::optional<type> name;
  CAIRN_TRAIN_STATE_FIELDS(CAIRN_RECORDS_STATE_MEMBER)
#undef CAIRN_RECORDS_STATE_MEMBER
  std::optional<std::string> layout;
  std::optional<std::string> data_fingerprint;
  // index.json's tokenizer id of the training data: cairn-eval refuses to score a dataset of another tokenizer.
  std::optional<std::string> tokenizer_id;
  // The learning-rate schedule the run trained on, as applied (min_lr resolved, warmup cut to the decay): a resume
  // under another one is caught instead of jumping the learning rate.
  struct LrSchedule {
    double lr = 0, min_lr = 0;
    int64_t warmup = 0, decay_steps = 0;
    std::string schedule;
  };
  std::optional<LrSchedule> lr_schedule;
  struct Spikes {
    std::vector<double> loss, norm;  // the accepted steps' recent losses and gradient norms, oldest first
  };
  std::optional<Spikes> spikes;

  nlohmann::json to_json() const;
  static TrainState from_json(const JsonFields& f);
};

// ---- train/kernel_profile.json (cairn-train --profile-kernels) ------------------------------------------------
// {"ranks": [{"rank": r, "ops": [{"op", "calls", "seconds"}, ...]}, ...], "steps": ..., "provenance": ...}: each
// rank's kernel table. Its ops summed over the ranks, longest first (ties in name order), as cairn-train logs them
// and cairn-report shows them; entries of the wrong shape are skipped (readers show what they can).
struct KernelOpTotal {
  std::string op;
  double calls = 0, seconds = 0;
};
struct KernelProfileTotals {
  std::vector<KernelOpTotal> ops;
  double seconds = 0;  // all ops
  int ranks = 0;       // ranks with an op table
};
KernelProfileTotals kernel_profile_totals(const nlohmann::json& doc);

}  // namespace cairn::records
