// Training checkpoints: <run>/train/ckpt/step_%08d/{model.h5, optim.rank%05d.h5, DONE} writer and reader.
// cairn-train writes and resumes them; cairn-eval loads model weights through read_model().
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cairn/gpt.h"
#include "cairn/records.h"

namespace cairn::checkpoint {

// "<root>/step_00001000" for step 1000.
std::string step_dir(const std::string& root, int64_t step);
// The directory name's step, or -1 if `name` is not "step_%08d".
int64_t parse_step_dir(const std::string& name);

// One checkpoint directory found under a root, with its state.
struct Entry {
  int64_t step = -1;
  std::string dir;
  bool complete = false;  // DONE present and every file it lists matches its size and checksum
  std::string problem;    // why it is not complete ("" when complete)
  // DONE was there when `problem` was found (list()): a sealed entry's problem is damage, not a write in progress.
  // Read together with the check, so a checkpoint sealed meanwhile (a run still writing) is never both.
  bool sealed = false;
};

// True when `dir` holds the DONE marker seal() writes last: the checkpoint was completed (whether its files are still
// intact is check_dir's question). A step directory without it is a write (or a prune) that was interrupted.
bool is_sealed(const std::string& dir);

// What identifies a checkpoint's contents, so a reader keying results by it sees a step that was written again (a
// rollback rewrites step N): the xxh64 (16 hex digits) of its DONE marker, which lists every file's xxh64 (model.h5
// carries the time it was written); for a model.h5 outside a sealed directory, the file's own xxh64. "" when
// neither can be read.
std::string checkpoint_id(const std::string& path_or_dir);
// When the checkpoint was completed (DONE's modification time, or the model.h5 file's), in unix seconds; 0 if unknown.
double sealed_time(const std::string& path_or_dir);

// Every step_* directory under `root`, oldest first. With verify, checksums in DONE are checked
// (reads every file); without, only DONE's presence and the listed files' sizes.
std::vector<Entry> list(const std::string& root, bool verify = true);
// Newest complete checkpoint under `root` with a step below `below`; incomplete or corrupt newer ones are reported
// with CAIRN_LOG_WARN and skipped. Empty if none (or root missing).
std::optional<Entry> find_newest_complete(const std::string& root, bool verify = true,
                                          int64_t below = std::numeric_limits<int64_t>::max());
// Checks one checkpoint directory (DONE present, sizes and xxh64 of listed files); "" if good.
std::string check_dir(const std::string& dir, bool verify = true);

// What model.h5 holds besides the weights.
struct ModelMeta {
  gpt::GptConfig config;
  int64_t step = 0;
  int64_t tokens = 0;
  nlohmann::json train_state = nlohmann::json::object();  // trainer's own state (loader position, ...)
  std::string config_toml;                                // effective config of the run
  std::string version, git_sha;                           // of the tool that wrote it ("" when not recorded)
};

// Writes model.h5: one dataset per tensor under /params/<HF GPT-2 name> with its shape,
// attrs step, tokens, the model config (layers, hidden, heads, seq_len, vocab, vocab_real),
// train_state (JSON text) and provenance.
void write_model(const std::string& path, const ModelMeta& meta, const std::vector<gpt::TensorInfo>& tensors,
                 const float* params);
// model.h5 written one tensor at a time, so a writer that assembles the model from many ranks' pieces never holds
// more than one tensor: the constructor creates the file with write_model's attributes and layout, write(i, data)
// fills tensors[i] (t.size floats, any order, each once) with its xxh64, close() checks every tensor was written.
class ModelWriter {
 public:
  ModelWriter(const std::string& path, const ModelMeta& meta, std::vector<gpt::TensorInfo> tensors);
  ~ModelWriter();
  ModelWriter(const ModelWriter&) = delete;
  ModelWriter& operator=(const ModelWriter&) = delete;
  void write(size_t i, const float* data);
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads the metadata of a model.h5 (a file path or a checkpoint directory).
ModelMeta read_model_meta(const std::string& path_or_dir);
// Reads the weights into `params` laid out by `tensors` (from a Model of the same config). Errors
// name the file and tensor on a missing tensor or shape mismatch.
void read_model(const std::string& path_or_dir, const std::vector<gpt::TensorInfo>& tensors, float* params);
// model.h5 open for reading one tensor at a time (t.size floats into out, checked like read_model): a reader that
// needs only some tensors, or one at a time, never holds the whole model.
class ModelReader {
 public:
  explicit ModelReader(const std::string& path_or_dir);
  ~ModelReader();
  ModelReader(const ModelReader&) = delete;
  ModelReader& operator=(const ModelReader&) = delete;
  void read(const gpt::TensorInfo& t, float* out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One rank's optimizer state: AdamW moments for flat parameter range [offset, offset+count).
struct OptimShard {
  uint64_t offset = 0;
  uint64_t count = 0;
  uint64_t total = 0;  // number of parameters of the model
  int64_t adam_step = 0;
  std::vector<float> m, v;
  nlohmann::json rank_state = nlohmann::json::object();  // per-rank trainer state
};
std::string optim_file_name(int rank);  // "optim.rank00003.h5"
void write_optim(const std::string& path, const OptimShard& shard);
// An optimizer file written range by range: the header of `shard` (offset, count, total, adam_step, rank_state; its
// m and v are not read), then write(at, n, m, v) fills [at, at + n) of its count values (relative to offset).
class OptimWriter {
 public:
  OptimWriter(const std::string& path, const OptimShard& header);
  ~OptimWriter();
  OptimWriter(const OptimWriter&) = delete;
  OptimWriter& operator=(const OptimWriter&) = delete;
  void write(uint64_t at, uint64_t n, const float* m, const float* v);
  // One moment at a time, for writers that assemble each from pieces in one reused buffer.
  void write_m(uint64_t at, uint64_t n, const float* m);
  void write_v(uint64_t at, uint64_t n, const float* v);
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
OptimShard read_optim(const std::string& path);
// Fills m/v for the parameter range [offset, offset+count) from every optim.rank*.h5 in `dir`
// (works when the checkpoint was written with another rank count or ZeRO setting). Throws if a
// part of the range is covered by no file.
void read_optim_range(const std::string& dir, uint64_t offset, uint64_t count, float* m, float* v, int64_t* adam_step);
// One optimizer file's header: the flat range it holds (its values are not read).
struct OptimPart {
  std::string file;  // path
  uint64_t offset = 0, count = 0;
  int64_t adam_step = 0;
};
// The headers of every optim.rank*.h5 in `dir`, in name order: what a reader needs to open only the files it reads
// (one rank can list them and hand the list to the others, instead of every rank opening every rank's file).
std::vector<OptimPart> optim_parts(const std::string& dir);
// The same as read_optim_range over the directory's optimizer files opened once (those holding values), for many
// ranges. With `parts` (optim_parts' list) only the files overlapping [lo, hi) are opened.
class OptimReader {
 public:
  explicit OptimReader(const std::string& dir);
  OptimReader(const std::string& dir, const std::vector<OptimPart>& parts, uint64_t lo, uint64_t hi);
  ~OptimReader();
  OptimReader(const OptimReader&) = delete;
  OptimReader& operator=(const OptimReader&) = delete;
  void read(uint64_t offset, uint64_t count, float* m, float* v, int64_t* adam_step) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Flushes a file this process wrote to stable storage and describes it as DONE lists it (name, size, xxh64): each
// rank describes its own files, so their read-back and fsync run on every rank at once instead of all on rank 0.
records::CheckpointDone::File describe_written_file(const std::string& path);

// Finalises a checkpoint written into `tmp_dir` (all ranks' files present): records sizes and
// xxh64 of every file, renames tmp_dir to final_dir (replacing an old one), then writes DONE.
// Rank 0 calls this after a barrier. Files in `described` (describe_written_file of their writers) are taken as
// described; the others are flushed and read back here.
void seal(const std::string& tmp_dir, const std::string& final_dir, int64_t step, int world_size,
          const std::vector<records::CheckpointDone::File>& described = {});

// Deletes complete checkpoints beyond the newest `keep_last`, except those whose step is a multiple
// of keep_every (> 0), and stale temporary directories. Returns the directories removed. Each is renamed to a
// temporary name before it is deleted, so a prune killed midway leaves a temporary directory (removed by the next
// prune), never a half-deleted step directory.
std::vector<std::string> prune(const std::string& root, int keep_last, int64_t keep_every);

// Removes the step directories without DONE that are older than the newest sealed one: what a prune killed midway
// left before prune renamed first. Never a write in progress: writes go to a temporary directory that is renamed
// into place just before DONE, so only the newest step can be caught without it. Sealed directories are never
// touched. Returns the directories removed; one that cannot be removed is a warning.
std::vector<std::string> remove_unsealed_leftovers(const std::string& root);

// xxHash64 of a whole file (streamed).
uint64_t file_xxh64(const std::string& path);

}  // namespace cairn::checkpoint
