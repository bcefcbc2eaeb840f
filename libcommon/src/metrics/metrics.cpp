// metrics.jsonl writer, TensorBoard tfevents writer (hand-encoded protobuf) and Chrome trace collector.
#include "cairn/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <boost/crc.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/provenance.h"

using nlohmann::json;

namespace cairn::metrics {

uint32_t crc32c(const void* data, size_t n) {
  // Castagnoli: poly 0x1EDC6F41, init and final xor all ones, reflected in and out.
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, n);
  return crc.checksum();
}

uint32_t masked_crc32c(const void* data, size_t n) {
  uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

// ---------------------------------------------------------------- jsonl

namespace {
// The step a line records, read without parsing it (the top-level "step": key as JsonlWriter writes it; the key inside
// a string would be escaped, \"step\"); nullopt for a line without one.
std::optional<int64_t> quick_step(std::string_view line) {
  for (size_t at = line.find("\"step\":"); at != std::string_view::npos; at = line.find("\"step\":", at + 1)) {
    size_t before = at;
    while (before > 0 && line[before - 1] == ' ') --before;
    if (before == 0 || (line[before - 1] != '{' && line[before - 1] != ',')) continue;
    size_t v = at + 7;
    while (v < line.size() && line[v] == ' ') ++v;
    int64_t step = 0;
    const auto [end, ec] = std::from_chars(line.data() + v, line.data() + line.size(), step);
    if (ec == std::errc() && end != line.data() + v) return step;
  }
  return std::nullopt;
}

bool parses(std::string_view line) { return json::accept(line); }

// Calls visit(line, begin, stop) for the lines of the open file `fd` (`size` bytes) from the last back, `begin` being
// the offset of the line's first byte and `stop` one past its '\n' (or the file's end, for an unterminated last line),
// until visit returns true. Read a chunk at a time from the end, so a long file's tail costs only its own bytes.
template <class Visit>
void for_each_line_backward(int fd, const std::string& path, off_t size, Visit visit) {
  std::string buf;  // file bytes [pos, pos + buf.size()): a chunk and the start of the line it ends inside
  off_t pos = size;
  constexpr size_t kChunk = 1 << 20;
  for (bool found = false; !found && pos > 0;) {
    const off_t want = std::min<off_t>(pos, static_cast<off_t>(kChunk));
    std::string more(static_cast<size_t>(want), '\0');
    if (::pread(fd, more.data(), more.size(), pos - want) != want)
      throw RuntimeError(errno_message("cannot read", path));
    pos -= want;
    more.append(buf);
    buf.swap(more);
    // Whole lines only: unless at the file's start, the first bytes may end a line that starts further back.
    size_t first = 0;
    if (pos > 0) {
      const size_t nl = buf.find('\n');
      if (nl == std::string::npos) continue;
      first = nl + 1;
    }
    // Lines from the last back: [begin, content_end), `stop` one past its '\n' (or the end of an unterminated one).
    size_t stop = buf.size();
    while (stop > first) {
      const size_t content_end = buf[stop - 1] == '\n' ? stop - 1 : stop;
      size_t begin = content_end == first ? std::string::npos : buf.rfind('\n', content_end - 1);
      begin = begin == std::string::npos || begin < first ? first : begin + 1;
      if (visit(std::string_view(buf).substr(begin, content_end - begin), pos + static_cast<off_t>(begin),
                pos + static_cast<off_t>(stop))) {
        found = true;
        break;
      }
      stop = begin;
    }
    buf.resize(found ? 0 : first);  // what is left: the line that starts in an earlier chunk
  }
}

struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

// Keeps the lines up to `step`: lines with a later step and torn lines go, lines without a step stay. The file is in
// step order (every run appends after cutting it at its checkpoint), so it is read back from the end to the last line
// at or before `step`, and only what follows is rewritten: a resume late in a long run used to parse and rewrite the
// whole file (612 k lines: 11.7 s and 648 MB before the first step).
void cut_after_step(const std::string& path, int64_t step) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw RuntimeError(errno_message("cannot open", path));
  FdCloser closer{fd};
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < 0) throw RuntimeError(errno_message("cannot read", path));
  std::vector<std::pair<off_t, off_t>> stepless;  // [begin, end) of the tail's lines without a step, last first
  bool drop = false;                              // the tail holds a line to remove
  off_t cut = 0;
  for_each_line_backward(fd, path, size, [&](std::string_view line, off_t begin, off_t stop) {
    const auto s = quick_step(line);
    if (s && *s <= step && parses(line)) {
      cut = stop;
      return true;
    }
    const off_t content_end = begin + static_cast<off_t>(line.size());
    if (s || line.empty()) drop |= !line.empty();
    else stepless.emplace_back(begin, content_end);
    if (stop == size && content_end == stop) drop = true;  // the file's last line is unterminated
    return false;
  });
  // The tail's lines without a step stay if they parse (a provenance line); a torn one goes.
  std::string kept;
  for (auto it = stepless.rbegin(); it != stepless.rend(); ++it) {
    std::string line(static_cast<size_t>(it->second - it->first), '\0');
    if (::pread(fd, line.data(), line.size(), it->first) != static_cast<ssize_t>(line.size()))
      throw RuntimeError(errno_message("cannot read", path));
    if (parses(line)) kept.append(line).push_back('\n');
    else drop = true;
  }
  // The cut line may be the file's last bytes, unterminated: the next line must not join it.
  char last = '\n';
  if (cut > 0 && ::pread(fd, &last, 1, cut - 1) != 1) throw RuntimeError(errno_message("cannot read", path));
  if (!drop && last == '\n') return;
  std::string tail(last == '\n' ? 0 : 1, '\n');
  tail.append(kept);
  if (::ftruncate(fd, cut) != 0 ||
      (!tail.empty() && ::pwrite(fd, tail.data(), tail.size(), cut) != static_cast<ssize_t>(tail.size())) ||
      ::fsync(fd) != 0)
    throw RuntimeError(errno_message("cannot write", path));
}
}  // namespace

std::optional<int64_t> last_step_of_kind(const std::string& path, const std::string& kind) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw RuntimeError(errno_message("cannot open", path));
  }
  FdCloser closer{fd};
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < 0) throw RuntimeError(errno_message("cannot read", path));
  std::optional<int64_t> step;
  for_each_line_backward(fd, path, size, [&](std::string_view line, off_t, off_t) {
    // Cheap tests first (a provenance line holds a whole config); parsed only when it may be one of `kind`.
    if (line.find("\"kind\"") == std::string_view::npos || !quick_step(line)) return false;
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object() || j.value("kind", "") != kind || !j.contains("step") || !j["step"].is_number_integer())
      return false;
    step = j["step"].get<int64_t>();
    return true;
  });
  return step;
}

JsonlWriter::JsonlWriter(const std::string& path, int64_t truncate_after_step) : path_(path) {
  if (truncate_after_step >= 0 && path_exists(path)) cut_after_step(path, truncate_after_step);
  f_ = std::fopen(path.c_str(), "a");
  if (!f_) throw RuntimeError(errno_message("cannot open", path));
}

JsonlWriter::~JsonlWriter() { close(); }

JsonlWriter::JsonlWriter(JsonlWriter&& o) noexcept : f_(o.f_), path_(std::move(o.path_)) { o.f_ = nullptr; }

JsonlWriter& JsonlWriter::operator=(JsonlWriter&& o) noexcept {
  if (this != &o) {
    close();
    f_ = o.f_;
    path_ = std::move(o.path_);
    o.f_ = nullptr;
  }
  return *this;
}

void JsonlWriter::write(const json& line) {
  if (!f_) return;
  std::string s = line.dump(-1, ' ', false, json::error_handler_t::replace);
  s.push_back('\n');
  if (std::fwrite(s.data(), 1, s.size(), f_) != s.size() || std::fflush(f_) != 0) {
    throw RuntimeError(errno_message("cannot write", path_));
  }
}

void JsonlWriter::sync() {
  if (!f_) return;
  if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0) throw RuntimeError(errno_message("cannot sync", path_));
}

void JsonlWriter::close() {
  if (f_) std::fclose(f_);
  f_ = nullptr;
}

// ---------------------------------------------------------------- protobuf + TFRecord

namespace {
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, int field, int wire) { put_varint(out, (static_cast<uint64_t>(field) << 3) | wire); }
void put_fixed64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_fixed32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_double(std::string& out, int field, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, 8);
  put_tag(out, field, 1);
  put_fixed64(out, bits);
}
void put_bytes(std::string& out, int field, std::string_view b) {
  put_tag(out, field, 2);
  put_varint(out, b.size());
  out.append(b.data(), b.size());
}
}  // namespace

namespace {
// Event { double wall_time = 1; int64 step = 2; <field> = payload } for a step event (a summary or a session log).
std::string encode_step_event(double wall_time, int64_t step, int field, std::string_view payload) {
  std::string ev;
  put_double(ev, 1, wall_time);
  put_tag(ev, 2, 0);
  put_varint(ev, static_cast<uint64_t>(step));
  put_bytes(ev, field, payload);
  return ev;
}
}  // namespace

// Event { double wall_time = 1; int64 step = 2; oneof { string file_version = 3; Summary summary = 5; } }
std::string encode_event_file_version(double wall_time, const std::string& version) {
  std::string ev;
  put_double(ev, 1, wall_time);
  put_bytes(ev, 3, version);
  return ev;
}

// Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
std::string encode_event_scalars(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, float>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string val;
    put_bytes(val, 1, tag);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    put_tag(val, 2, 5);
    put_fixed32(val, bits);
    put_bytes(summary, 1, val);
  }
  return encode_step_event(wall_time, step, 5, summary);
}

// Event { ...; SessionLog session_log = 7; }  SessionLog { SessionStatus status = 1 (START = 1); string msg = 3; }
std::string encode_event_session_start(double wall_time, int64_t step, const std::string& message) {
  std::string log;
  put_tag(log, 1, 0);
  put_varint(log, 1);
  if (!message.empty()) put_bytes(log, 3, message);
  return encode_step_event(wall_time, step, 7, log);
}

// Summary.Value { string tag = 1; TensorProto tensor = 8; SummaryMetadata metadata = 9; } with
// TensorProto { DataType dtype = 1 (DT_STRING = 7); repeated bytes string_val = 8; } (a scalar: no shape) and
// SummaryMetadata { PluginData plugin_data = 1 { string plugin_name = 1 ("text"); } }: what tf.summary.text writes.
std::string encode_event_text(double wall_time, int64_t step, const std::string& tag, const std::string& text) {
  std::string tensor, plugin, metadata, value, summary;
  put_tag(tensor, 1, 0);
  put_varint(tensor, 7);
  put_bytes(tensor, 8, text);
  put_bytes(plugin, 1, "text");
  put_bytes(metadata, 1, plugin);
  put_bytes(value, 1, tag);
  put_bytes(value, 8, tensor);
  put_bytes(value, 9, metadata);
  put_bytes(summary, 1, value);
  return encode_step_event(wall_time, step, 5, summary);
}

std::string frame_record(std::string_view data) {
  std::string out;
  std::string len;
  put_fixed64(len, data.size());
  out += len;
  put_fixed32(out, masked_crc32c(len.data(), len.size()));
  out.append(data.data(), data.size());
  put_fixed32(out, masked_crc32c(data.data(), data.size()));
  return out;
}

TfEventsWriter::TfEventsWriter(const std::string& dir, const std::string& suffix) {
  path_ = join_path(dir, strprintf("events.out.tfevents.%lld.%s", static_cast<long long>(std::time(nullptr)),
                                   hostname_string().c_str()));
  if (!suffix.empty()) path_ += "." + suffix;
  f_ = std::fopen(path_.c_str(), "ab");
  if (!f_) throw RuntimeError(errno_message("cannot open", path_));
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  write_record(encode_event_file_version(static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9));
  flush();
}

TfEventsWriter::~TfEventsWriter() { close(); }

void TfEventsWriter::write_record(std::string_view data) {
  std::string rec = frame_record(data);
  if (std::fwrite(rec.data(), 1, rec.size(), f_) != rec.size())
    throw RuntimeError(errno_message("cannot write", path_));
}

void TfEventsWriter::add_scalar(const std::string& tag, float value, int64_t step, double wall_time) {
  add_scalars({{tag, value}}, step, wall_time);
}

void TfEventsWriter::add_scalars(const std::vector<std::pair<std::string, float>>& values, int64_t step,
                                 double wall_time) {
  if (!f_) return;
  write_record(encode_event_scalars(wall_time, step, values));
}

void TfEventsWriter::add_session_start(int64_t step, double wall_time, const std::string& message) {
  if (!f_) return;
  write_record(encode_event_session_start(wall_time, step, message));
}

void TfEventsWriter::add_text(const std::string& tag, const std::string& markdown, int64_t step, double wall_time) {
  if (!f_) return;
  write_record(encode_event_text(wall_time, step, tag, markdown));
}

void TfEventsWriter::flush() {
  if (f_ && std::fflush(f_) != 0) throw RuntimeError(errno_message("cannot write", path_));
}

void TfEventsWriter::close() {
  if (f_) std::fclose(f_);
  f_ = nullptr;
}

// ---------------------------------------------------------------- Chrome trace

void Trace::add(const std::string& name, const std::string& category, int pid, int tid, int64_t ts_us, int64_t dur_us,
                const json& args) {
  events_.push_back({name, category, args.is_null() ? std::string() : args.dump(), ts_us, std::max<int64_t>(dur_us, 0),
                     pid, tid, false});
}

int64_t Trace::to_us(double t_s, double epoch_s) { return std::llround((t_s - epoch_s) * 1e6); }

int64_t Trace::first_ts() const {
  int64_t first = std::numeric_limits<int64_t>::max();
  for (const auto& e : events_)
    if (!e.metadata) first = std::min(first, e.ts);
  return first;
}

std::string Trace::events_text(int64_t shift_us) const {
  std::string out;
  out.reserve(events_.size() * 120);
  for (const auto& e : events_) {
    if (!out.empty()) out += ',';
    // Keys in the order nlohmann::json writes them (sorted), so a file reads the same as before.
    out += "{";
    if (!e.args.empty()) out += "\"args\":" + e.args + ",";
    if (!e.metadata) {
      out += "\"cat\":" + json(e.cat).dump() + ",\"dur\":" + std::to_string(e.dur) + ",";
    }
    out += "\"name\":" + json(e.name).dump() + ",\"ph\":\"" + (e.metadata ? "M" : "X") +
           "\",\"pid\":" + std::to_string(e.pid) + ",\"tid\":" + std::to_string(e.tid);
    if (!e.metadata) out += ",\"ts\":" + std::to_string(e.ts + shift_us);
    out += "}";
  }
  return out;
}

json Trace::events() const {
  std::string text = "[";  // piecewise: GCC 12's -Wrestrict misfires on "[" + s + "]"
  text.append(events_text()).append("]");
  return json::parse(text);
}

void Trace::rebase() {
  const int64_t first = first_ts();
  if (first == std::numeric_limits<int64_t>::max() || first == 0) return;
  for (auto& e : events_)
    if (!e.metadata) e.ts -= first;
}

void Trace::name_process(int pid, const std::string& name) {
  events_.push_back({"process_name", "", json{{"name", name}}.dump(), 0, 0, pid, 0, true});
  events_.push_back({"process_sort_index", "", json{{"sort_index", pid}}.dump(), 0, 0, pid, 0, true});
}

void Trace::name_thread(int pid, int tid, const std::string& name) {
  events_.push_back({"thread_name", "", json{{"name", name}}.dump(), 0, 0, pid, tid, true});
}

std::string Trace::document(const std::string& events_text, const json& other_data) {
  return "{\"displayTimeUnit\":\"ms\",\"otherData\":" + other_data.dump() + ",\"traceEvents\":[" + events_text + "]}";
}

std::string Trace::to_json(const json& other_data) const { return document(events_text(), other_data); }

}  // namespace cairn::metrics
