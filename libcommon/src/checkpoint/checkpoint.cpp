// Checkpoint files (model.h5, optim.rank*.h5, DONE) and the directory protocol around them.
#include "cairn/checkpoint.h"
#include "cairn/json_text.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cairn/config.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/h5.h"
#include "cairn/log.h"
#include "cairn/records.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace cairn::checkpoint {

namespace {
constexpr const char* kDone = records::kCheckpointDoneFile;
constexpr const char* kModel = "model.h5";
constexpr const char* kTmpPrefix = ".tmp_";

std::string model_path(const std::string& path_or_dir) {
  std::error_code ec;
  if (fs::is_directory(path_or_dir, ec)) return join_path(path_or_dir, kModel);
  return path_or_dir;
}

// Deletes a checkpoint directory without ever leaving a half-deleted step directory: it is renamed to a temporary
// name first (atomic), then removed; a kill midway leaves a temporary directory, which the next prune removes.
// An error only when the rename fails (the directory is then untouched).
std::error_code remove_step_dir(const std::string& dir) {
  const fs::path p(dir);
  const fs::path trash = p.parent_path() / (std::string(kTmpPrefix) + "removed_" + p.filename().string());
  std::error_code ec;
  fs::remove_all(trash, ec);  // what an earlier kill left under that name
  ec.clear();
  fs::rename(p, trash, ec);
  if (ec) return ec;
  std::error_code rm;
  fs::remove_all(trash, rm);
  if (rm) CAIRN_LOG_WARN("cannot remove \"%s\": %s (the next prune retries)", trash.c_str(), rm.message().c_str());
  return ec;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}
}  // namespace

std::string step_dir(const std::string& root, int64_t step) {
  return join_path(root, strprintf("step_%08lld", static_cast<long long>(step)));
}

int64_t parse_step_dir(const std::string& name) {
  if (name.size() < 6 || name.compare(0, 5, "step_") != 0) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

uint64_t file_xxh64(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RuntimeError(errno_message("cannot open", path));
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    std::streamsize n = in.gcount();
    if (n > 0) XXH64_update(st, buf.data(), static_cast<size_t>(n));
  }
  const bool failed = in.bad();
  uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  // A read error part-way is not a checksum of the file.
  if (failed) throw RuntimeError(errno_message("cannot read", path));
  return h;
}

bool is_sealed(const std::string& dir) { return path_exists(join_path(dir, kDone)); }

namespace {
// The DONE marker that speaks for a checkpoint directory or a model.h5 in one; "" when there is none.
std::string done_of(const std::string& path_or_dir) {
  std::error_code ec;
  const std::string dir =
      fs::is_directory(path_or_dir, ec) ? path_or_dir : fs::path(path_or_dir).parent_path().string();
  const std::string done = join_path(dir.empty() ? "." : dir, kDone);
  return path_exists(done) ? done : "";
}
}  // namespace

std::string checkpoint_id(const std::string& path_or_dir) {
  try {
    const std::string done = done_of(path_or_dir);
    return hex64(file_xxh64(done.empty() ? model_path(path_or_dir) : done));
  } catch (const std::exception&) {
    return "";
  }
}

double sealed_time(const std::string& path_or_dir) {
  const std::string done = done_of(path_or_dir);
  struct stat st {};
  if (::stat((done.empty() ? model_path(path_or_dir) : done).c_str(), &st) != 0) return 0;
  return static_cast<double>(st.st_mtim.tv_sec) + 1e-9 * static_cast<double>(st.st_mtim.tv_nsec);
}

std::string check_dir(const std::string& dir, bool verify) {
  // A malformed DONE (not JSON, wrong types, missing keys) makes the checkpoint incomplete, with the reason,
  // so `--resume auto` falls back to the previous one instead of aborting.
  try {
    const std::optional<records::CheckpointDone> marker = records::read_checkpoint_done(dir);
    if (!marker) return "no DONE marker (incomplete: the writer was interrupted)";
    for (const auto& file : marker->files) {
      std::string p = join_path(dir, file.name);
      std::error_code ec;
      auto size = fs::file_size(p, ec);
      if (ec) return file.name + " is missing";
      if (size != file.bytes) {
        return strprintf("%s has %llu bytes, DONE says %llu", file.name.c_str(), static_cast<unsigned long long>(size),
                         static_cast<unsigned long long>(file.bytes));
      }
      if (verify && hex64(file_xxh64(p)) != file.xxh64) return file.name + " checksum mismatch (corrupt)";
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<Entry> list(const std::string& root, bool verify) {
  std::vector<Entry> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& de : fs::directory_iterator(root, ec)) {
    if (!de.is_directory()) continue;
    int64_t step = parse_step_dir(de.path().filename().string());
    if (step < 0) continue;
    Entry e;
    e.step = step;
    e.dir = de.path().string();
    out.push_back(e);
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.step < b.step; });
  for (auto& e : out) {
    const bool done_before = is_sealed(e.dir);
    e.problem = check_dir(e.dir, verify);
    e.complete = e.problem.empty();
    e.sealed = done_before || e.complete;
  }
  // A checkpoint the trainer pruned (renamed away) while it was being checked is gone, not damaged: a reader that
  // follows a run (cairn-eval --watch) would otherwise report it as a failure.
  std::erase_if(out, [](const Entry& e) {
    std::error_code gone;
    return !e.complete && !fs::exists(e.dir, gone);
  });
  return out;
}

std::optional<Entry> find_newest_complete(const std::string& root, bool verify, int64_t below) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return std::nullopt;
  std::vector<Entry> entries;
  for (const auto& de : fs::directory_iterator(root, ec)) {
    int64_t step = de.is_directory() ? parse_step_dir(de.path().filename().string()) : -1;
    if (step >= 0 && step < below) entries.push_back(Entry{step, de.path().string(), false, "", false});
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.step > b.step; });
  // Newest first; verify lazily so a long history is not checksummed on every resume.
  for (auto& e : entries) {
    e.problem = check_dir(e.dir, verify);
    if (e.problem.empty()) {
      e.complete = e.sealed = true;
      return e;
    }
    CAIRN_LOG_WARN("skipping checkpoint \"%s\": %s", e.dir.c_str(), e.problem.c_str());
  }
  return std::nullopt;
}

struct ModelWriter::Impl {
  std::string path;
  h5::File f;
  h5::Group g;
  std::vector<gpt::TensorInfo> tensors;
  std::vector<char> written;
};

ModelWriter::ModelWriter(const std::string& path, const ModelMeta& meta, std::vector<gpt::TensorInfo> tensors)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.tensors = std::move(tensors);
  m.written.assign(m.tensors.size(), 0);
  m.f = h5::File::create(path);
  m.g = m.f.create_group("params");
  h5::File& f = m.f;
  f.set_attr("format", "cairn-checkpoint-1");
  f.set_attr("step", meta.step);
  f.set_attr("tokens", meta.tokens);
  f.set_attr("layers", meta.config.layers);
  f.set_attr("hidden", meta.config.hidden);
  f.set_attr("heads", meta.config.heads);
  f.set_attr("seq_len", meta.config.seq_len);
  f.set_attr("vocab", meta.config.vocab);
  f.set_attr("vocab_real", meta.config.vocab_real);
  f.set_attr("train_state", json_text(meta.train_state));
  f.set_attr("config_toml", meta.config_toml);
  h5::write_provenance(f);
}

ModelWriter::~ModelWriter() = default;

void ModelWriter::write(size_t i, const float* data) {
  Impl& m = *impl_;
  const gpt::TensorInfo& t = m.tensors.at(i);
  std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
  if (dims.empty()) dims.push_back(t.size);
  h5::Dataset ds(h5::create_dataset_raw(m.g, t.name, H5T_NATIVE_FLOAT, dims), m.g.path() + "/" + t.name);
  h5::write_raw(ds, H5T_NATIVE_FLOAT, data);
  ds.set_attr("xxh64", hex64(XXH64(data, t.size * sizeof(float), 0)));
  m.written[i] = 1;
}

void ModelWriter::close() {
  Impl& m = *impl_;
  for (size_t i = 0; i < m.tensors.size(); ++i)
    if (!m.written[i])
      throw RuntimeError(file_message("cannot write", m.path, "tensor " + m.tensors[i].name + " missing"));
  m.f.flush();
  m.f.close();
}

void write_model(const std::string& path, const ModelMeta& meta, const std::vector<gpt::TensorInfo>& tensors,
                 const float* params) {
  ModelWriter w(path, meta, tensors);
  for (size_t i = 0; i < tensors.size(); ++i) w.write(i, params + tensors[i].offset);
  w.close();
}

ModelMeta read_model_meta(const std::string& path_or_dir) {
  std::string path = model_path(path_or_dir);
  h5::File f = h5::File::open(path);
  ModelMeta m;
  try {
    m.step = f.attr_int("step");
    m.tokens = f.attr_int("tokens");
    m.config.layers = static_cast<int>(f.attr_int("layers"));
    m.config.hidden = static_cast<int>(f.attr_int("hidden"));
    m.config.heads = static_cast<int>(f.attr_int("heads"));
    m.config.seq_len = static_cast<int>(f.attr_int("seq_len"));
    m.config.vocab = static_cast<int>(f.attr_int("vocab"));
    m.config.vocab_real = static_cast<int>(f.attr_int("vocab_real"));
    if (f.has_attr("train_state")) m.train_state = json::parse(f.attr_string("train_state"));
    if (f.has_attr("config_toml")) m.config_toml = f.attr_string("config_toml");
    if (f.has_attr("version")) m.version = f.attr_string("version");
    if (f.has_attr("git_sha")) m.git_sha = f.attr_string("git_sha");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw RuntimeError(file_message("cannot read checkpoint metadata of", path, e.what()));
  }
  return m;
}

struct ModelReader::Impl {
  std::string path;
  h5::File f;
  h5::Group g;
};

ModelReader::ModelReader(const std::string& path_or_dir) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = model_path(path_or_dir);
  m.f = h5::File::open(m.path);
  if (!m.f.exists("params"))
    throw RuntimeError(file_message("cannot read", m.path, "no /params group (not a cairn checkpoint)"));
  m.g = m.f.group("params");
}

ModelReader::~ModelReader() = default;

void ModelReader::read(const gpt::TensorInfo& t, float* out) const {
  const Impl& m = *impl_;
  if (!m.g.exists(t.name)) throw RuntimeError(file_message("cannot read", m.path, "missing tensor /params/" + t.name));
  h5::Dataset ds = m.g.dataset(t.name);
  if (ds.size() != t.size) {
    throw RuntimeError(file_message("cannot read", m.path,
                                    strprintf("tensor /params/%s has %llu values, the model expects %zu",
                                              t.name.c_str(), static_cast<unsigned long long>(ds.size()), t.size)));
  }
  // The shape too: a tensor stored transposed (a PyTorch nn.Linear's [out, in] where GPT-2's Conv1D layout is
  // [in, out]) has the right count and loaded silently as other weights.
  const std::vector<hsize_t> dims = ds.dims();
  std::vector<hsize_t> want(t.shape.begin(), t.shape.end());
  if (want.empty()) want.push_back(t.size);
  if (dims != want) {
    auto shape_text = [](const std::vector<hsize_t>& d) {
      std::string s;
      for (hsize_t x : d) s += (s.empty() ? "" : ", ") + std::to_string(x);
      return "(" + s + ")";
    };
    throw RuntimeError(file_message("cannot read", m.path,
                                    "tensor /params/" + t.name + " has shape " + shape_text(dims) +
                                        ", the model expects " + shape_text(want)));
  }
  h5::read_raw(ds, H5T_NATIVE_FLOAT, out);
  if (ds.has_attr("xxh64") && ds.attr_string("xxh64") != hex64(XXH64(out, t.size * sizeof(float), 0))) {
    throw RuntimeError(file_message("cannot read", m.path, "checksum mismatch in tensor /params/" + t.name));
  }
}

void read_model(const std::string& path_or_dir, const std::vector<gpt::TensorInfo>& tensors, float* params) {
  ModelReader r(path_or_dir);
  for (const auto& t : tensors) r.read(t, params + t.offset);
}

std::string optim_file_name(int rank) { return strprintf("optim.rank%05d.h5", rank); }

struct OptimWriter::Impl {
  h5::File f;
  h5::Dataset m, v;
};

OptimWriter::OptimWriter(const std::string& path, const OptimShard& s) : impl_(std::make_unique<Impl>()) {
  h5::File& f = impl_->f;
  f = h5::File::create(path);
  f.set_attr("offset", s.offset);
  f.set_attr("count", s.count);
  f.set_attr("total", s.total);
  f.set_attr("adam_step", s.adam_step);
  f.set_attr("rank_state", json_text(s.rank_state));
  std::vector<hsize_t> dims{s.count};
  impl_->m = h5::Dataset(h5::create_dataset_raw(f, "m", H5T_NATIVE_FLOAT, dims), path + "/m");
  impl_->v = h5::Dataset(h5::create_dataset_raw(f, "v", H5T_NATIVE_FLOAT, dims), path + "/v");
  h5::write_provenance(f);
}

OptimWriter::~OptimWriter() = default;

void OptimWriter::write(uint64_t at, uint64_t n, const float* m, const float* v) {
  write_m(at, n, m);
  write_v(at, n, v);
}

void OptimWriter::write_m(uint64_t at, uint64_t n, const float* m) {
  h5::write_range_raw(impl_->m, H5T_NATIVE_FLOAT, at, n, m);
}

void OptimWriter::write_v(uint64_t at, uint64_t n, const float* v) {
  h5::write_range_raw(impl_->v, H5T_NATIVE_FLOAT, at, n, v);
}

void OptimWriter::close() {
  impl_->m = h5::Dataset();
  impl_->v = h5::Dataset();
  impl_->f.flush();
  impl_->f.close();
}

void write_optim(const std::string& path, const OptimShard& s) {
  OptimWriter w(path, s);
  if (s.count > 0) w.write(0, s.count, s.m.data(), s.v.data());
  w.close();
}

OptimShard read_optim(const std::string& path) {
  h5::File f = h5::File::open(path);
  OptimShard s;
  s.offset = f.attr_uint("offset");
  s.count = f.attr_uint("count");
  s.total = f.attr_uint("total");
  s.adam_step = f.attr_int("adam_step");
  s.rank_state = json::parse(f.attr_string("rank_state"));
  s.m = f.read<float>("m");
  s.v = f.read<float>("v");
  if (s.m.size() != s.count || s.v.size() != s.count) {
    throw RuntimeError(file_message("cannot read", path, "moment sizes do not match the shard's count"));
  }
  return s;
}

struct OptimReader::Impl {
  std::string dir;
  struct Part {
    h5::File f;
    h5::Dataset m, v;
    uint64_t offset = 0, count = 0;
  };
  std::vector<Part> parts;  // the files holding values, in name order
  int64_t adam_step = 0;    // the last file's, as read_optim_range always reported
};

std::vector<OptimPart> optim_parts(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& de : fs::directory_iterator(dir, ec)) {
    std::string n = de.path().filename().string();
    if (n.rfind("optim.rank", 0) == 0 && n.size() > 3 && n.compare(n.size() - 3, 3, ".h5") == 0)
      files.push_back(de.path().string());
  }
  std::sort(files.begin(), files.end());
  std::vector<OptimPart> parts;
  for (const auto& p : files) {
    h5::File f = h5::File::open(p);
    parts.push_back({p, f.attr_uint("offset"), f.attr_uint("count"), f.attr_int("adam_step")});
  }
  return parts;
}

OptimReader::OptimReader(const std::string& dir)
    : OptimReader(dir, optim_parts(dir), 0, std::numeric_limits<uint64_t>::max()) {}

OptimReader::OptimReader(const std::string& dir, const std::vector<OptimPart>& parts, uint64_t lo, uint64_t hi)
    : impl_(std::make_unique<Impl>()) {
  impl_->dir = dir;
  for (const OptimPart& p : parts) {
    impl_->adam_step = p.adam_step;  // the last file's, as read_optim_range always reported
    // a rank that held no moments, or a range this reader never asks for: not opened
    if (p.count == 0 || p.offset >= hi || p.offset + p.count <= lo) continue;
    Impl::Part part;
    part.f = h5::File::open(p.file);
    part.offset = p.offset;
    part.count = p.count;
    part.m = part.f.dataset("m");
    part.v = part.f.dataset("v");
    impl_->parts.push_back(std::move(part));
  }
}

OptimReader::~OptimReader() = default;

void OptimReader::read(uint64_t offset, uint64_t count, float* m, float* v, int64_t* adam_step) const {
  if (adam_step) *adam_step = impl_->adam_step;
  uint64_t covered = 0;
  for (const Impl::Part& p : impl_->parts) {
    uint64_t lo = std::max(p.offset, offset), hi = std::min(p.offset + p.count, offset + count);
    if (lo >= hi) continue;
    p.m.read_range_into<float>(lo - p.offset, hi - lo, m + (lo - offset));
    p.v.read_range_into<float>(lo - p.offset, hi - lo, v + (lo - offset));
    covered += hi - lo;
  }
  if (covered != count) {
    // The first range no file holds names the missing file's place (the caller names the directory).
    uint64_t gap = offset;
    for (bool moved = true; moved;) {
      moved = false;
      for (const Impl::Part& p : impl_->parts)
        if (p.offset <= gap && gap < p.offset + p.count) gap = p.offset + p.count, moved = true;
    }
    uint64_t gap_end = offset + count;
    for (const Impl::Part& p : impl_->parts)
      if (p.offset > gap) gap_end = std::min(gap_end, p.offset);
    throw RuntimeError(strprintf("its optimizer files (optim.rank*.h5) hold %llu of the %llu values needed: values "
                                 "[%llu, %llu) are in none of them (a rank's file missing or cut short)",
                                 static_cast<unsigned long long>(covered), static_cast<unsigned long long>(count),
                                 static_cast<unsigned long long>(gap), static_cast<unsigned long long>(gap_end)));
  }
}

void read_optim_range(const std::string& dir, uint64_t offset, uint64_t count, float* m, float* v, int64_t* adam_step) {
  OptimReader(dir).read(offset, count, m, v, adam_step);
}

records::CheckpointDone::File describe_written_file(const std::string& path) {
  fsync_path(path);
  return {fs::path(path).filename().string(), fs::file_size(path), hex64(file_xxh64(path))};
}

void seal(const std::string& tmp_dir, const std::string& final_dir, int64_t step, int world_size,
          const std::vector<records::CheckpointDone::File>& described) {
  records::CheckpointDone marker;
  marker.step = step;
  marker.world_size = world_size;
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& de : fs::directory_iterator(tmp_dir, ec)) names.push_back(de.path().filename().string());
  if (ec) throw RuntimeError(file_message("cannot list", tmp_dir, ec.message()));
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    std::string p = join_path(tmp_dir, n);
    auto known = std::find_if(described.begin(), described.end(), [&](const auto& f) { return f.name == n; });
    // A described file is taken as its writer saw it, unless its size says it changed since (never expected).
    if (known != described.end() && known->bytes == fs::file_size(p)) marker.files.push_back(*known);
    else marker.files.push_back(describe_written_file(p));
  }
  // A file its writer described but this rank does not see (a stale directory cache of a network file system)
  // would be missing from DONE: refused, so the checkpoint is not sealed without it.
  for (const auto& f : described)
    if (!std::binary_search(names.begin(), names.end(), f.name))
      throw RuntimeError(file_message("cannot seal", tmp_dir, f.name + " was written but is not listed there"));
  if (path_exists(final_dir)) {
    ec = remove_step_dir(final_dir);
    if (ec) throw RuntimeError(file_message("cannot replace", final_dir, ec.message()));
  }
  rename_path(tmp_dir, final_dir);
  fsync_path(fs::path(final_dir).parent_path().string());
  atomic_write(join_path(final_dir, kDone), json_text(marker.to_json(), 1) + "\n");
}

std::vector<std::string> prune(const std::string& root, int keep_last, int64_t keep_every) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return removed;
  std::vector<std::pair<int64_t, std::string>> complete;
  for (const auto& de : fs::directory_iterator(root, ec)) {
    std::string n = de.path().filename().string();
    if (de.is_directory() && n.rfind(kTmpPrefix, 0) == 0) {
      fs::remove_all(de.path(), ec);
      removed.push_back(de.path().string());
      continue;
    }
    int64_t step = de.is_directory() ? parse_step_dir(n) : -1;
    // Complete = a DONE that parses and matches the files (a malformed DONE must not count, or it
    // could get the last good checkpoint pruned).
    if (step >= 0 && check_dir(de.path().string(), false).empty()) complete.emplace_back(step, de.path().string());
  }
  std::sort(complete.begin(), complete.end());
  int n = static_cast<int>(complete.size());
  for (int i = 0; i < n - keep_last; ++i) {
    if (keep_every > 0 && complete[i].first % keep_every == 0) continue;
    ec = remove_step_dir(complete[i].second);
    if (ec) {
      CAIRN_LOG_WARN("cannot remove old checkpoint \"%s\": %s", complete[i].second.c_str(), ec.message().c_str());
    } else {
      removed.push_back(complete[i].second);
    }
  }
  return removed;
}

std::vector<std::string> remove_unsealed_leftovers(const std::string& root) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return removed;
  std::vector<std::pair<int64_t, std::string>> steps;
  int64_t newest_sealed = -1;
  for (const auto& de : fs::directory_iterator(root, ec)) {
    const int64_t step = de.is_directory() ? parse_step_dir(de.path().filename().string()) : -1;
    if (step < 0) continue;
    steps.emplace_back(step, de.path().string());
    if (is_sealed(de.path().string())) newest_sealed = std::max(newest_sealed, step);
  }
  std::sort(steps.begin(), steps.end());
  for (const auto& [step, dir] : steps) {
    if (step >= newest_sealed || is_sealed(dir)) continue;
    ec = remove_step_dir(dir);
    if (ec) CAIRN_LOG_WARN("cannot remove \"%s\": %s", dir.c_str(), ec.message().c_str());
    else removed.push_back(dir);
  }
  return removed;
}

}  // namespace cairn::checkpoint
