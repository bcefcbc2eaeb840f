// Build inputs as streams: files, directories, globs and @manifests expanded; plain, gzip (zlib) and
// zstd (libzstd) bytes decompressed in bounded memory; text and JSONL split into raw records.
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/metrics.h"
#include "example.pb.h"
#include "reshard.h"

namespace cairn::reshard {

namespace fs = std::filesystem;

namespace {

bool has_gzip_magic(const unsigned char* p, size_t n) { return n >= 2 && p[0] == 0x1f && p[1] == 0x8b; }
// A zstd frame, or a skippable frame (magic 0x184D2A50..5F little-endian), which pzstd writes first and which the
// streaming decoder passes over.
bool has_zstd_magic(const unsigned char* p, size_t n) {
  if (n < 4) return false;
  const bool frame = p[0] == 0x28 && p[1] == 0xb5 && p[2] == 0x2f && p[3] == 0xfd;
  const bool skippable = (p[0] & 0xf0) == 0x50 && p[1] == 0x2a && p[2] == 0x4d && p[3] == 0x18;
  return frame || skippable;
}

// Compressed formats cairn does not decompress, by their magic: named in the error instead of "invalid UTF-8".
const char* unsupported_compression(const unsigned char* p, size_t n) {
  if (n >= 6 && std::memcmp(p,
                            "\xfd"
                            "7zXZ\0",
                            6) == 0)
    return "xz";
  // "BZh9" can begin a text: the first block's magic (pi's digits) or the end-of-stream one must follow.
  if (n >= 10 && std::memcmp(p, "BZh", 3) == 0 && p[3] >= '1' && p[3] <= '9' &&
      (std::memcmp(p + 4, "\x31\x41\x59\x26\x53\x59", 6) == 0 ||
       std::memcmp(p + 4, "\x17\x72\x45\x38\x50\x90", 6) == 0))
    return "bzip2";
  if (n >= 4 && p[0] == 0x04 && p[1] == 0x22 && p[2] == 0x4d && p[3] == 0x18) return "lz4";
  if (n >= 4 && std::memcmp(p, "PK\x03\x04", 4) == 0) return "zip";
  if (n >= 6 && std::memcmp(p, "7z\xbc\xaf\x27\x1c", 6) == 0) return "7z";
  return nullptr;
}

bool tfrecord_name(const std::string& name);

bool looks_binary(const fs::path& p) {
  FILE* f = std::fopen(p.c_str(), "rb");
  if (!f) return false;
  unsigned char buf[8192];
  size_t n = std::fread(buf, 1, sizeof buf, f);
  std::fclose(f);
  if (has_gzip_magic(buf, n) || has_zstd_magic(buf, n) || unsupported_compression(buf, n))
    return false;  // compressed text (or a compression named in the error, not skipped silently)
  if (tfrecord_name(p.string())) return false;  // binary by nature, but documents
  return std::find(buf, buf + n, '\0') != buf + n;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool has_wildcard(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

struct Expander {
  std::vector<std::string> out, dirs;
  std::set<std::string> seen;

  void add_file(const fs::path& p) {
    std::error_code ec;
    std::string canon = fs::weakly_canonical(p, ec).string();
    if (!seen.insert(ec ? p.string() : canon).second) return;
    out.push_back(p.string());
  }

  void add_directory(const std::string& in) {
    std::error_code ec;
    std::vector<fs::path> files;
    // A directory that cannot be read (no permission) is named: it was "no input files", or a filesystem_error
    // naming no path.
    fs::recursive_directory_iterator it(in, ec);
    if (ec) throw UsageError(file_message("cannot read directory", in, ec.message()));
    auto visit = [&]() {
      const auto name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory()) it.disable_recursion_pending();
        return;
      }
      if (it->is_directory() && is_lmdb_path(it->path().string())) {  // an LMDB environment is one input
        files.push_back(it->path());
        it.disable_recursion_pending();
        return;
      }
      if (it->is_symlink() && !fs::exists(it->path(), ec)) {
        // Said, not skipped silently: a link to data on a filesystem that is not mounted here loses documents.
        CAIRN_LOG_WARN("skipping \"%s\": a symbolic link to nothing", it->path().c_str());
        return;
      }
      if (it->is_regular_file() && !is_lmdb_path(it->path().parent_path().string())) files.push_back(it->path());
    };
    while (it != fs::recursive_directory_iterator()) {
      visit();
      const fs::path at = it->path();
      std::error_code step;
      it.increment(step);
      if (step) throw UsageError(file_message("cannot read directory", at.string(), step.message()));
    }
    std::sort(files.begin(), files.end());
    size_t binary = 0;
    std::string first_binary;
    for (auto& f : files) {
      // Binary files (e.g. fortune's .dat indexes) are not text documents.
      if (!fs::is_directory(f, ec) && looks_binary(f)) {
        CAIRN_LOG_DEBUG("skipping binary file %s", f.c_str());
        if (binary++ == 0) first_binary = f.string();
        continue;
      }
      add_file(f);
    }
    if (binary > 0)
      CAIRN_LOG_INFO("%s: skipped %zu file(s) that are not text (a NUL byte in the first 8 KiB), e.g. \"%s\"",
                     in.c_str(), binary, first_binary.c_str());
  }

  // One argument: "-", a file, a directory, a glob pattern or @manifest (`depth` guards manifest cycles).
  void add(const std::string& in, const std::string& origin, int depth) {
    if (in == "-") {
      require_open_stdin("input \"-\"");
      out.push_back(in);
      return;
    }
    std::error_code ec;
    if (in.size() > 1 && in[0] == '@' && !fs::exists(in, ec)) return add_manifest(in.substr(1), depth);
    if (!fs::exists(in, ec) && has_wildcard(in)) {
      // Patterns reach us unexpanded from configs, manifests and quoted arguments.
      glob_t g{};
      int rc = ::glob(in.c_str(), GLOB_ERR, nullptr, &g);
      std::vector<std::string> matches;
      if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i) matches.emplace_back(g.gl_pathv[i]);
      ::globfree(&g);
      if (matches.empty())
        throw UsageError(file_message("no input matches", in, "the pattern names no files" + origin));
      for (auto& m : matches) add(m, origin, depth);  // sorted by glob(3)
      return;
    }
    if (!fs::exists(in, ec))
      throw UsageError(file_message("cannot open input", in, "No such file or directory" + origin));
    if (fs::is_directory(in, ec) && is_lmdb_path(in)) add_file(in);  // an LMDB environment is one input
    else if (fs::is_directory(in, ec)) dirs.push_back(in), add_directory(in);
    else add_file(in);
  }

  // A manifest lists inputs one per line (files, directories, globs, further @manifests); relative
  // names are relative to the manifest's directory; blank lines and lines starting with # are skipped.
  void add_manifest(const std::string& path, int depth) {
    if (depth > 8)
      throw UsageError(file_message("cannot read manifest", path, "manifests nested more than 8 deep (a cycle?)"));
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      throw UsageError(
          file_message("cannot read manifest", path, "No such file (inputs starting with @ are manifests)"));
    std::string text = read_file(path);
    fs::path base = fs::path(path).parent_path();
    size_t pos = 0;
    uint64_t line = 0;
    while (pos <= text.size()) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string::npos) nl = text.size();
      std::string l = text.substr(pos, nl - pos);
      pos = nl + 1;
      ++line;
      size_t a = l.find_first_not_of(" \t\r"), b = l.find_last_not_of(" \t\r");
      if (a == std::string::npos) continue;
      l = l.substr(a, b - a + 1);
      if (l[0] == '#') continue;
      std::string entry = l;
      if (l != "-" && fs::path(l.size() > 1 && l[0] == '@' ? l.substr(1) : l).is_relative()) {
        entry = l[0] == '@' ? "@" + (base / l.substr(1)).string() : (base / l).string();
      }
      add(entry, strprintf(" (listed in %s:%llu)", path.c_str(), static_cast<unsigned long long>(line)), depth + 1);
    }
  }
};

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs, std::vector<std::string>* dirs) {
  Expander e;
  for (const auto& in : inputs) e.add(in, "", 0);
  if (dirs) *dirs = e.dirs;
  if (e.out.empty()) throw UsageError("no input files (give files, directories, globs, @manifests or - for stdin)");
  return e.out;
}

// ------------------------------------------------------------------------------------ byte streams

// Compressed bytes given to one ZSTD_decompressStream call (read_zstd).
constexpr size_t kZstdInputChunk = 4096;

struct InputStream::Impl {
  std::string shown;
  int fd = -1;
  bool own_fd = false;
  enum class Kind { Plain, Gzip, Zstd } kind = Kind::Plain;
  std::vector<unsigned char> in;  // compressed (or plain) bytes read from the file, not yet consumed
  size_t in_pos = 0, in_len = 0;
  uint64_t raw_read = 0;  // bytes read from the file
  bool raw_eof = false;
  uint64_t produced = 0;  // decompressed bytes handed out
  z_stream zs{};
  bool z_init = false, z_member_done = false;
  ZSTD_DCtx* zd = nullptr;
  size_t zstd_hint = 0;  // ZSTD_decompressStream's return: 0 when the last frame is complete
  // A decoder error found in a call that also produced text: that text is returned first (the documents before the
  // damage are kept, with --skip-bad), and the error is thrown by the next read.
  std::string pending_error;

  ~Impl() {
    if (z_init) inflateEnd(&zs);
    if (zd) ZSTD_freeDCtx(zd);
    if (own_fd && fd >= 0) ::close(fd);
  }

  // Refills `in` (keeping unconsumed bytes); false at the end of the file.
  bool refill() {
    if (raw_eof) return false;
    if (in_pos > 0) {
      std::memmove(in.data(), in.data() + in_pos, in_len - in_pos);
      in_len -= in_pos;
      in_pos = 0;
    }
    for (;;) {
      ssize_t n = ::read(fd, in.data() + in_len, in.size() - in_len);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw RuntimeError(errno_message("cannot read", shown));
      }
      if (n == 0) {
        raw_eof = true;
        return false;
      }
      in_len += static_cast<size_t>(n);
      raw_read += static_cast<uint64_t>(n);
      return true;
    }
  }
  // Compressed bytes consumed by the decoder so far.
  uint64_t consumed() const { return raw_read - (in_len - in_pos); }

  size_t read_plain(char* out, size_t n) {
    if (in_pos < in_len) {  // the bytes read to detect the format
      size_t take = std::min(n, in_len - in_pos);
      std::memcpy(out, in.data() + in_pos, take);
      in_pos += take;
      return take;
    }
    if (raw_eof) return 0;
    for (;;) {
      ssize_t r = ::read(fd, out, n);
      if (r < 0) {
        if (errno == EINTR) continue;
        throw RuntimeError(errno_message("cannot read", shown));
      }
      if (r == 0) raw_eof = true;
      raw_read += static_cast<uint64_t>(r);
      return static_cast<size_t>(r);
    }
  }

  size_t read_gzip(char* out, size_t n) {
    if (!pending_error.empty()) throw InputStreamError(pending_error);
    for (;;) {
      if (in_pos == in_len && !refill()) {
        if (z_member_done || raw_read == 0) return 0;
        throw InputStreamError(file_message(
            "truncated gzip input", shown,
            strprintf("the file ends at compressed byte %llu inside a gzip stream (%llu bytes decompressed)",
                      static_cast<unsigned long long>(raw_read), static_cast<unsigned long long>(produced))));
      }
      if (z_member_done) {  // concatenated gzip members (pigz, `cat a.gz b.gz`)
        inflateReset(&zs);
        z_member_done = false;
      }
      zs.next_in = in.data() + in_pos;
      zs.avail_in = static_cast<uInt>(in_len - in_pos);
      zs.next_out = reinterpret_cast<Bytef*>(out);
      zs.avail_out = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
      int rc = inflate(&zs, Z_NO_FLUSH);
      size_t got = reinterpret_cast<char*>(zs.next_out) - out;
      in_pos = in_len - zs.avail_in;
      if (rc == Z_STREAM_END) z_member_done = true;
      else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        const std::string why =
            file_message("corrupt gzip input", shown,
                         strprintf("at compressed byte %llu: %s", static_cast<unsigned long long>(consumed()),
                                   zs.msg ? zs.msg : "invalid data"));
        if (got == 0) throw InputStreamError(why);
        pending_error = why;
      }
      if (got > 0) {
        produced += got;
        return got;
      }
    }
  }

  size_t read_zstd(char* out, size_t n) {
    if (!pending_error.empty()) throw InputStreamError(pending_error);
    for (;;) {
      if (in_pos == in_len && !refill()) {
        if (zstd_hint == 0) return 0;
        throw InputStreamError(file_message(
            "truncated zstd input", shown,
            strprintf("the file ends at compressed byte %llu inside a zstd frame (%llu bytes decompressed)",
                      static_cast<unsigned long long>(raw_read), static_cast<unsigned long long>(produced))));
      }
      // A few KiB of input a call: on an error zstd reports none of the call's output, so what the blocks before
      // the damage decoded is returned by the calls before (as `zstd -d` keeps it), not dropped with the call.
      const size_t chunk_end = std::min(in_len, in_pos + kZstdInputChunk);
      ZSTD_inBuffer ib{in.data(), chunk_end, in_pos};
      ZSTD_outBuffer ob{out, n, 0};
      size_t r = ZSTD_decompressStream(zd, &ob, &ib);
      if (ZSTD_isError(r))
        throw InputStreamError(
            file_message("corrupt zstd input", shown,
                         strprintf("in compressed bytes %llu..%llu: %s", static_cast<unsigned long long>(consumed()),
                                   static_cast<unsigned long long>(consumed() + (chunk_end - in_pos)),
                                   ZSTD_getErrorName(r))));
      in_pos = ib.pos;
      zstd_hint = r;
      if (ob.pos > 0) {
        produced += ob.pos;
        return ob.pos;
      }
    }
  }
};

InputStream::InputStream(const std::string& name) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.shown = name == "-" ? "<stdin>" : name;
  if (name == "-") {
    m.fd = STDIN_FILENO;
  } else {
    m.fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
    if (m.fd < 0) throw UsageError(errno_message("cannot open input", name));
    m.own_fd = true;
    ::posix_fadvise(m.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  }
  // 1 MiB of input buffer, or the file's size when smaller: the zero-filled megabyte was most of the time of a build
  // over thousands of small files (man pages, a docs tree: 6.8 s for 123 MB against 1.3 s as one file).
  size_t in_size = size_t{1} << 20;
  struct stat st {};
  if (m.own_fd && ::fstat(m.fd, &st) == 0 && S_ISREG(st.st_mode))
    in_size = std::clamp<size_t>(static_cast<size_t>(st.st_size) + 1, 64, in_size);
  m.in.resize(in_size);
  // The format is told by the first bytes, whatever the name says (stdin has none).
  while (m.in_len < 10 && m.refill()) {
  }
  if (const char* other = unsupported_compression(m.in.data(), m.in_len))
    throw UsageError(file_message("unsupported input", m.shown,
                                  strprintf("compressed with %s; cairn reads gzip and zstd (decompress it and "
                                            "pipe it in: ... | cairn-reshard build -)",
                                            other)));
  if (has_gzip_magic(m.in.data(), m.in_len)) {
    m.kind = Impl::Kind::Gzip;
    if (inflateInit2(&m.zs, 16 + MAX_WBITS) != Z_OK) throw RuntimeError("zlib initialisation failed");
    m.z_init = true;
  } else if (has_zstd_magic(m.in.data(), m.in_len)) {
    m.kind = Impl::Kind::Zstd;
    m.zd = ZSTD_createDCtx();
    if (!m.zd) throw RuntimeError("zstd initialisation failed");
    m.zstd_hint = 1;
  }
}

InputStream::~InputStream() = default;

size_t InputStream::read(char* out, size_t n) {
  switch (impl_->kind) {
    case Impl::Kind::Gzip: return impl_->read_gzip(out, n);
    case Impl::Kind::Zstd: return impl_->read_zstd(out, n);
    default: return impl_->read_plain(out, n);
  }
}

uint64_t InputStream::raw_consumed() const {
  return impl_->kind == Impl::Kind::Plain ? impl_->raw_read - (impl_->in_len - impl_->in_pos) : impl_->consumed();
}
const std::string& InputStream::shown() const { return impl_->shown; }
const char* InputStream::compression() const {
  return impl_->kind == Impl::Kind::Gzip ? "gzip" : impl_->kind == Impl::Kind::Zstd ? "zstd" : "none";
}

// ------------------------------------------------------------------------------------ records

TextSettings text_settings(const DataSection& data) {
  TextSettings s;
  s.format = data.format;
  s.delimiter = data.delimiter;
  // The delimiter is compared with whole lines: one holding a line break could never match (every document would
  // run to the end of its file), so it is refused.
  if (s.delimiter.find_first_of("\r\n") != std::string::npos)
    throw UsageError("[data] delimiter (--delimiter) holds a line break: it is a line of its own between documents "
                     "(fortune's \"%\"), compared without its newline");
  s.field = data.jsonl_field;
  s.skip_bad = data.skip_bad;
  return s;
}

namespace {
std::string without_compression_suffix(std::string base) {
  for (const char* ext : {".gz", ".zst", ".zstd"})
    if (ends_with(base, ext)) {
      base.resize(base.size() - std::strlen(ext));
      break;
    }
  return base;
}
bool tfrecord_name(const std::string& name) {
  const std::string base = without_compression_suffix(name);
  return ends_with(base, ".tfrecord") || ends_with(base, ".tfrecords") || ends_with(base, ".tfrec");
}
}  // namespace

InputKind input_kind(const std::string& name, const TextSettings& s) {
  if (s.format == "jsonl") return InputKind::Jsonl;
  if (s.format == "text") return InputKind::Text;
  if (tfrecord_name(name)) return InputKind::TfRecord;
  const std::string base = without_compression_suffix(name);
  return ends_with(base, ".jsonl") || ends_with(base, ".ndjson") ? InputKind::Jsonl : InputKind::Text;
}

RecordReader::RecordReader(const std::string& name, const TextSettings& s)
    : shown_(name == "-" ? "<stdin>" : name), settings_(s), kind_(input_kind(name, s)) {
  if (name != "-" && is_lmdb_path(name)) {
    lmdb_ = std::make_unique<LmdbInput>(name);
    kind_ = s.format == "jsonl" ? InputKind::Jsonl : InputKind::Text;  // values: JSON objects or raw text
  } else {
    stream_ = std::make_unique<InputStream>(name);
  }
}

bool RecordReader::compressed() const { return stream_ && std::string(stream_->compression()) != "none"; }

bool RecordReader::ensure(size_t n) {
  while (buf_.size() - pos_ < n)
    if (!fill()) return false;
  return true;
}

// TFRecord framing: uint64 length, masked CRC32C of those 8 bytes, the payload, its masked CRC32C
// (all little-endian). A bad length CRC loses the framing (the rest of the file cannot be found); a
// bad payload CRC spoils only that record, checked by decode_record on a tokenizing thread.
void RecordReader::next_tfrecords(RecordBatch& batch, size_t max_bytes) {
  const std::string& shown = shown_;
  while (batch.raw.size() < max_bytes) {
    if (!ensure(1)) {
      done_ = true;
      return;
    }
    const uint64_t off = buf_offset_ + pos_, rec = line_;
    if (!ensure(12))
      throw InputStreamError(
          file_message("truncated TFRecord input", shown,
                       strprintf("record %llu at byte offset %llu: the file ends inside its header",
                                 static_cast<unsigned long long>(rec), static_cast<unsigned long long>(off))));
    uint64_t len = 0;
    uint32_t len_crc = 0;
    std::memcpy(&len, buf_.data() + pos_, 8);
    std::memcpy(&len_crc, buf_.data() + pos_ + 8, 4);
    const auto* head = reinterpret_cast<const unsigned char*>(buf_.data() + pos_);
    if (metrics::masked_crc32c(buf_.data() + pos_, 8) != len_crc && off == 0 && head[0] == 0x78 &&
        ((head[0] << 8) | head[1]) % 31 == 0)
      // Not damage to skip past (--skip-bad would drop the whole file as one record): another format.
      throw UsageError(file_message("unsupported TFRecord input", shown,
                                    "it starts with a zlib header, not a record (TensorFlow's ZLIB compression "
                                    "option?); cairn reads plain and GZIP TFRecord files"));
    if (metrics::masked_crc32c(buf_.data() + pos_, 8) != len_crc)
      throw InputStreamError(file_message(
          "corrupt TFRecord input", shown,
          strprintf("record %llu at byte offset %llu: the length's CRC does not match (the records after it "
                    "cannot be found)",
                    static_cast<unsigned long long>(rec), static_cast<unsigned long long>(off))));
    if (len > UINT32_MAX)
      throw InputStreamError(
          file_message("unsupported TFRecord input", shown,
                       strprintf("record %llu at byte offset %llu holds %llu bytes (over 4 GiB)",
                                 static_cast<unsigned long long>(rec), static_cast<unsigned long long>(off),
                                 static_cast<unsigned long long>(len))));
    if (!ensure(12 + len + 4))
      throw InputStreamError(
          file_message("truncated TFRecord input", shown,
                       strprintf("record %llu at byte offset %llu: the file ends inside its %llu-byte payload",
                                 static_cast<unsigned long long>(rec), static_cast<unsigned long long>(off),
                                 static_cast<unsigned long long>(len))));
    uint32_t crc = 0;
    std::memcpy(&crc, buf_.data() + pos_ + 12 + len, 4);
    add_record(batch, std::string_view(buf_.data() + pos_ + 12, len), rec, off);
    batch.records.back().crc = crc;
    pos_ += 12 + len + 4;
    ++line_;
  }
}

bool RecordReader::fill() {
  if (eof_) return false;
  if (pos_ > 0) {  // keep only the unconsumed tail
    buf_.erase(0, pos_);
    buf_offset_ += pos_;
    pos_ = 0;
  }
  // Read into a scratch block that is never zero-filled, then append what came: resizing buf_ by 4 MiB per fill
  // zero-filled 4 MiB, at least twice per file, whatever the file's size.
  const size_t step = 4 << 20;
  if (!chunk_) chunk_.reset(new char[step]);
  const size_t got = stream_->read(chunk_.get(), step);
  buf_.append(chunk_.get(), got);
  if (got == 0) eof_ = true;
  return got > 0;
}

bool RecordReader::next_line(std::string_view& line, uint64_t& offset, bool& complete) {
  size_t scan = pos_;  // bytes before this were searched already (a long line spans many reads)
  for (;;) {
    const char* b = buf_.data() + pos_;
    // A search, nothing is copied: no terminator is needed (the check assumes a copy).
    // NOLINTNEXTLINE(bugprone-not-null-terminated-result)
    const void* nl = std::memchr(buf_.data() + scan, '\n', buf_.size() - scan);
    if (nl) {
      size_t len = static_cast<const char*>(nl) - b;
      line = std::string_view(b, len);
      offset = buf_offset_ + pos_;
      complete = true;
      pos_ += len + 1;
      return true;
    }
    const size_t searched = buf_.size() - pos_;
    if (!fill()) {
      if (pos_ == buf_.size()) return false;
      line = std::string_view(buf_.data() + pos_, buf_.size() - pos_);
      offset = buf_offset_ + pos_;
      complete = false;
      pos_ = buf_.size();
      return true;
    }
    scan = pos_ + searched;
  }
}

void RecordReader::add_record(RecordBatch& batch, std::string_view text, uint64_t line, uint64_t offset) {
  RecordBatch::Record r;
  r.begin = batch.raw.size();
  batch.raw.append(text);
  r.end = batch.raw.size();
  r.line = line;
  r.offset = offset;
  batch.records.push_back(r);
  ++records_;
}

bool RecordReader::next(RecordBatch& batch, size_t max_bytes) {
  batch.clear();
  batch.kind = kind_;
  batch.unit = lmdb_ ? "entry" : kind_ == InputKind::TfRecord ? "record" : "line";
  if (done_) return false;
  try {
    if (lmdb_) {
      std::string_view v;
      while (batch.raw.size() < max_bytes) {
        if (!lmdb_->next(v)) {
          done_ = true;
          break;
        }
        const uint64_t entry = line_++;
        add_record(batch, v, entry, 0);
      }
      lmdb_->release_read_pages();
    } else if (kind_ == InputKind::TfRecord) {
      next_tfrecords(batch, max_bytes);
    } else if (kind_ == InputKind::Jsonl) {
      std::string_view l;
      uint64_t off = 0;
      bool complete = false;
      while (batch.raw.size() < max_bytes && next_line(l, off, complete)) {
        const uint64_t line = line_++;
        if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
        if (l.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank lines are no records
        add_record(batch, l, line, off);
      }
      if (batch.raw.size() < max_bytes) done_ = true;
    } else if (settings_.delimiter.empty()) {
      // The whole input is one document (it must fit in memory, like any single document).
      while (fill()) {
      }
      add_record(batch, std::string_view(buf_).substr(pos_), 1, buf_offset_ + pos_);
      pos_ = buf_.size();
      done_ = true;
    } else {
      // Documents are the lines between lines equal to the delimiter, newlines included.
      std::string_view l;
      uint64_t off = 0;
      bool complete = false;
      while (batch.raw.size() < max_bytes) {
        if (!next_line(l, off, complete)) {
          flush_doc(batch);
          done_ = true;
          break;
        }
        const uint64_t line = line_++;
        std::string_view body = l;
        if (!body.empty() && body.back() == '\r') body.remove_suffix(1);
        if (body == settings_.delimiter) {
          flush_doc(batch);
          doc_line_ = line + 1;
          doc_offset_ = off + l.size() + (complete ? 1 : 0);
          continue;
        }
        // The line joins the open document (kept in `doc_` until the document ends).
        if (doc_.empty()) doc_offset_ = off;
        doc_.append(l);
        if (complete) doc_.push_back('\n');
      }
    }
  } catch (const InputStreamError& e) {
    // The rest of the input is unreadable: what was read stays (a partial last record is dropped).
    stream_error_ = e.what();
    done_ = true;
    doc_.clear();
  }
  return !batch.records.empty() || !done_;
}

void RecordReader::flush_doc(RecordBatch& batch) {
  if (!doc_.empty()) add_record(batch, doc_, doc_line_, doc_offset_);
  doc_.clear();
}

uint64_t RecordReader::raw_consumed() const { return lmdb_ ? lmdb_->bytes_read() : stream_->raw_consumed(); }
uint64_t RecordReader::decompressed_bytes() const { return buf_offset_ + buf_.size(); }

// ------------------------------------------------------------------------------------ decoding

namespace {
bool lmdb_value(const RecordBatch& b) { return std::strcmp(b.unit, "entry") == 0; }

std::string short_json_error(const std::string& what) {
  // nlohmann's message without its "[json.exception.parse_error.101] " prefix.
  std::string w = what;
  if (auto p = w.find("] "); w.rfind("[json.exception", 0) == 0 && p != std::string::npos) w = w.substr(p + 2);
  return w;
}
}  // namespace

bool decode_record(const RecordBatch& batch, size_t i, const TextSettings& s, std::string& storage,
                   std::string_view& text, RecordProblem& problem) {
  const RecordBatch::Record& r = batch.records[i];
  std::string_view raw(batch.raw.data() + r.begin, r.end - r.begin);
  problem.unit = batch.unit;
  if (batch.kind == InputKind::TfRecord) {
    if (metrics::masked_crc32c(raw.data(), raw.size()) != r.crc) {
      problem = {r.line, r.offset, "the payload's CRC does not match (corrupt record)", "record"};
      return false;
    }
    thread_local tf::Example example;  // reused: its maps and strings keep their memory
    if (!example.ParseFromArray(raw.data(), static_cast<int>(raw.size()))) {
      problem = {r.line, r.offset, "the payload is not a tf.train.Example", "record"};
      return false;
    }
    const auto& features = example.features().feature();
    auto it = features.find(s.field);
    if (it == features.end() || !it->second.has_bytes_list() || it->second.bytes_list().value_size() == 0) {
      problem = {r.line, r.offset, "no bytes feature \"" + s.field + "\"", "record"};
      return false;
    }
    storage = it->second.bytes_list().value(0);
    text = storage;
    size_t bad = tokenizer::find_invalid_utf8(text);
    if (bad != std::string_view::npos) {
      problem = {r.line, r.offset, strprintf("invalid UTF-8 at byte %zu of feature \"%s\"", bad, s.field.c_str()),
                 "record"};
      return false;
    }
    if (text.size() > UINT32_MAX) {
      problem = {r.line, r.offset, "document longer than 4 GiB", "record"};
      return false;
    }
    return true;
  }
  size_t bad = tokenizer::find_invalid_utf8(raw);
  if (bad != std::string_view::npos) {
    // The line of the bad byte, not of the record's start (text documents span lines).
    problem = {r.line + static_cast<uint64_t>(std::count(raw.begin(), raw.begin() + bad, '\n')), r.offset + bad,
               "invalid UTF-8", batch.unit};
    return false;
  }
  if (batch.kind == InputKind::Jsonl) {
    json j;
    try {
      j = json::parse(raw);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999999
      problem = {r.line, r.offset,
                 std::string(lmdb_value(batch) ? "broken JSON value (" : "broken JSON line (") +
                     short_json_error(e.what()) + ")",
                 batch.unit};
      return false;
    }
    if (!j.is_object() || !j.contains(s.field) || !j[s.field].is_string()) {
      problem = {r.line, r.offset, "no string field \"" + s.field + "\"", batch.unit};
      return false;
    }
    storage = std::move(j[s.field].get_ref<std::string&>());
    text = storage;
    // JSON escapes cannot make invalid UTF-8 past nlohmann's checks, but the stored text is what counts.
    if (tokenizer::find_invalid_utf8(text) != std::string_view::npos) {
      problem = {r.line, r.offset, "invalid UTF-8 in field \"" + s.field + "\"", batch.unit};
      return false;
    }
  } else {
    text = raw;
  }
  if (text.size() > UINT32_MAX) {
    problem = {r.line, r.offset, "document longer than 4 GiB", batch.unit};
    return false;
  }
  return true;
}

std::string describe_problem(const std::string& shown, bool compressed, const RecordProblem& p) {
  if (std::strcmp(p.unit, "entry") == 0)  // LMDB: entries in key order, no byte offsets
    return file_message("bad input", shown,
                        strprintf("entry %llu: %s (use --skip-bad to skip such records)",
                                  static_cast<unsigned long long>(p.line), p.why.c_str()));
  return file_message("bad input", shown,
                      strprintf("%s %llu (byte offset %llu%s): %s (use --skip-bad to skip such records)", p.unit,
                                static_cast<unsigned long long>(p.line), static_cast<unsigned long long>(p.offset),
                                compressed ? " of the decompressed stream" : "", p.why.c_str()));
}

}  // namespace cairn::reshard
