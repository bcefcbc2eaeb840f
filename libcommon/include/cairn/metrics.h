// Metric sinks: metrics.jsonl lines, TensorBoard event files (TFRecord + Event protobuf, no TensorFlow),
// and Chrome trace JSON (complete events, opened by Perfetto / chrome://tracing).
#pragma once
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace cairn::metrics {

// CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected) and TFRecord's masked form.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

// Appends one JSON object per line and flushes each line, so a killed run loses nothing written.
class JsonlWriter {
 public:
  JsonlWriter() = default;
  // Opens `path` for appending (creating it). With truncate_after_step >= 0, lines whose "step" is
  // greater are dropped first (a resumed run rewrites the steps after its checkpoint).
  explicit JsonlWriter(const std::string& path, int64_t truncate_after_step = -1);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  JsonlWriter(JsonlWriter&& o) noexcept;
  JsonlWriter& operator=(JsonlWriter&& o) noexcept;
  bool is_open() const { return f_ != nullptr; }
  void write(const nlohmann::json& line);
  // The lines written so far onto the disk (fsync), not only the page cache: before a checkpoint is sealed, so a
  // node that crashes after it does not leave the checkpoint without the steps it covers.
  void sync();
  void close();

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
};

// The step of the last line of `kind` ("kind": "train") in a JSON-lines file of lines in step order (metrics.jsonl),
// read back from the end; nullopt when the file does not exist or holds no such line. A resume compares it with its
// checkpoint's step: a log that ends before it lost the records of the steps between.
std::optional<int64_t> last_step_of_kind(const std::string& path, const std::string& kind);

// TensorBoard scalar event writer: <dir>/events.out.tfevents.<unix time>.<host>[.<suffix>].
// Each record is TFRecord-framed (length, masked CRC of length, data, masked CRC of data); the first
// event carries file_version "brain.Event:2", the rest a Summary with one simple_value per tag.
class TfEventsWriter {
 public:
  TfEventsWriter() = default;
  explicit TfEventsWriter(const std::string& dir, const std::string& suffix = "");
  ~TfEventsWriter();
  TfEventsWriter(const TfEventsWriter&) = delete;
  TfEventsWriter& operator=(const TfEventsWriter&) = delete;
  bool is_open() const { return f_ != nullptr; }
  const std::string& path() const { return path_; }
  void add_scalar(const std::string& tag, float value, int64_t step, double wall_time);
  // Several scalars of one step in one Event.
  void add_scalars(const std::vector<std::pair<std::string, float>>& values, int64_t step, double wall_time);
  // A SessionLog START event at `step`: the run (re)starts there. TensorBoard then drops every event with a step >=
  // `step` read before it (its event_accumulator's purge), so the steps a killed or rolled-back run wrote beyond the
  // checkpoint it resumes from show once, as rewritten, not twice.
  void add_session_start(int64_t step, double wall_time, const std::string& message = "");
  // A text summary (TensorBoard's Text tab renders it as Markdown): the run's provenance beside its scalars.
  void add_text(const std::string& tag, const std::string& markdown, int64_t step, double wall_time);
  void flush();
  void close();

 private:
  void write_record(std::string_view data);
  std::FILE* f_ = nullptr;
  std::string path_;
};

// Protobuf encodings used by TfEventsWriter (exposed for tests).
std::string encode_event_file_version(double wall_time, const std::string& version = "brain.Event:2");
std::string encode_event_scalars(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, float>>& values);
std::string encode_event_session_start(double wall_time, int64_t step, const std::string& message = "");
std::string encode_event_text(double wall_time, int64_t step, const std::string& tag, const std::string& text);
// TFRecord framing of one record.
std::string frame_record(std::string_view data);

// Collects Chrome trace "complete" events (ph "X") with integer microseconds (ts, dur) since an epoch the
// caller picks (one per run, so ranks line up after their clocks are aligned). Integers keep ts + dur exact in
// every viewer: a child converted with the same clock as its parent can never end one ulp past it.
class Trace {
 public:
  void add(const std::string& name, const std::string& category, int pid, int tid, int64_t ts_us, int64_t dur_us,
           const nlohmann::json& args = nullptr);
  // Microseconds from epoch_s to t_s (seconds on one clock), rounded: monotonic in t_s, so intervals nested or
  // disjoint in seconds stay nested or disjoint in microseconds.
  static int64_t to_us(double t_s, double epoch_s);
  // Names a process / thread row in the viewer (metadata events).
  void name_process(int pid, const std::string& name);
  void name_thread(int pid, int tid, const std::string& name);
  size_t size() const { return events_.size(); }
  bool empty() const { return events_.empty(); }
  // The earliest start of a timed event; INT64_MAX when there is none.
  int64_t first_ts() const;
  // Every event as JSON objects separated by commas (the inside of traceEvents' array), timed events moved by
  // shift_us: what ranks send to the one that writes the file, with no JSON tree built on either side.
  std::string events_text(int64_t shift_us = 0) const;
  // The events as a JSON array (for tests and small traces).
  nlohmann::json events() const;
  // Shifts every timed event so the earliest starts at ts 0 (metadata events have no ts).
  void rebase();
  // {"displayTimeUnit":"ms", "otherData":{...}, "traceEvents":[...]}
  std::string to_json(const nlohmann::json& other_data = nlohmann::json::object()) const;
  // The same document around events already as text (events_text of each rank, joined with commas).
  static std::string document(const std::string& events_text, const nlohmann::json& other_data);
  void clear() { events_.clear(); }

 private:
  // Held compactly (~10x less memory than a JSON object per event: a long trace of a large model on rank 0 had
  // reached gigabytes), written out as text.
  struct Event {
    std::string name, cat, args;  // args: JSON text, "" when none
    int64_t ts = 0, dur = 0;
    int pid = 0, tid = 0;
    bool metadata = false;  // ph "M": no cat, ts or dur
  };
  std::vector<Event> events_;
};

}  // namespace cairn::metrics
