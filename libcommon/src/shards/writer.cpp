// Writing one cairn token shard (HDF5, contiguous /tokens) through a temp file renamed on completion.
// HDF5 lays out the file (datasets allocated up front); the bulk data is then written with pwrite at
// the datasets' offsets, so many writer threads run in parallel without the (non-thread-safe) library.
#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/h5.h"
#include "cairn/log.h"
#include "cairn/shards.h"

namespace cairn::shards {

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex m;
  return m;
}

namespace {

// Creates a 1-D contiguous dataset allocated at creation time; returns its byte offset (-1 if empty).
int64_t create_fixed(const h5::File& f, const char* name, hid_t type, uint64_t n, const std::string& where) {
  hsize_t dims[1] = {n};
  h5::Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose);
  h5::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_layout(dcpl.id(), H5D_CONTIGUOUS);
  H5Pset_alloc_time(dcpl.id(), H5D_ALLOC_TIME_EARLY);
  H5Pset_fill_time(dcpl.id(), H5D_FILL_TIME_NEVER);
  hid_t d = H5Dcreate2(f.id(), name, type, space.id(), H5P_DEFAULT, dcpl.id(), H5P_DEFAULT);
  if (d < 0) h5::throw_h5("cannot create dataset", where + "/" + name);
  h5::Handle ds(d, H5Dclose);
  if (n == 0) return -1;
  haddr_t off = H5Dget_offset(d);
  if (off == HADDR_UNDEF) h5::throw_h5("cannot locate dataset", where + "/" + name);
  return static_cast<int64_t>(off);
}

void pwrite_all(int fd, const void* data, size_t size, uint64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::pwrite(fd, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw RuntimeError(errno_message("cannot write", path));
    }
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

// The temp file of a shard being written; removed unless committed (renamed into place).
// Named as atomic_write's temps are (".<name>.tmp.<host>.<pid>.<hex>"), so remove_stale_temps finds a killed run's.
struct TempFile {
  std::string target;
  TempName name;
  const std::string& temp;  // name.path()
  bool committed = false;
  explicit TempFile(const std::string& path) : target(path), name(path), temp(name.path()) {}
  ~TempFile() {
    if (!committed) ::unlink(temp.c_str());
  }
  // fsync + rename. The directory is synced once per dataset (write_dataset), not per shard: a
  // rename lost in a crash only means that shard is rewritten on resume.
  void commit() {
    fsync_path(temp);
    rename_path(temp, target);
    committed = true;
  }
  // Asks the kernel to start writing the whole file back now, so a later commit()'s fsync finds it
  // (nearly) on disk instead of waiting for all of it.
  void start_writeback() const {
#ifdef __linux__
    int fd = ::open(temp.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    ::close(fd);
#endif
  }
};

}  // namespace

struct ShardWriter::Impl {
  std::string path;
  ShardMeta meta;
  uint64_t num_tokens = 0, num_documents = 0;
  bool narrow = true;
  TempFile atomic;
  int fd = -1;
  int64_t tokens_off = -1, offsets_off = -1, bytes_off = -1;
  uint64_t written = 0;  // tokens flushed to the file
  std::vector<uint16_t> buf16;
  std::vector<uint32_t> buf32;
  size_t buffered = 0;
  std::vector<uint64_t> offsets{0};
  std::vector<uint32_t> bytes;
  XXH64_state_t* hash = XXH64_createState();

  Impl(const std::string& p, const ShardMeta& m, uint64_t nt, uint64_t nd)
      : path(p), meta(m), num_tokens(nt), num_documents(nd), narrow(tokens_fit_uint16(m.vocab_size)), atomic(p) {
    XXH64_reset(hash, 0);
    {
      std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
      h5::File f = h5::File::create(atomic.temp);
      tokens_off = create_fixed(f, "tokens", narrow ? H5T_STD_U16LE : H5T_STD_U32LE, nt, p);
      offsets_off = create_fixed(f, "doc_offsets", H5T_STD_U64LE, nd + 1, p);
      bytes_off = create_fixed(f, "doc_bytes", H5T_STD_U32LE, nd, p);
      f.set_attr("format", "cairn-shard");
      f.set_attr("format_version", static_cast<int64_t>(kFormatVersion));
      f.set_attr("tokenizer", meta.tokenizer_id);
      f.set_attr("vocab_size", static_cast<int64_t>(meta.vocab_size));
      f.set_attr("eot_id", static_cast<int64_t>(meta.eot_id));
      f.set_attr("shard_index", static_cast<int64_t>(meta.shard_index));
      f.set_attr("shard_count", static_cast<int64_t>(meta.shard_count));
      f.set_attr("seed", meta.seed);
      f.set_attr("tokens_xxh64", static_cast<uint64_t>(0));  // set in finish()
      f.set_attr("num_tokens", nt);
      f.set_attr("num_documents", nd);
      f.set_attr("plan_hash", meta.plan_hash);
      h5::write_provenance(f);
      f.close();
    }
    fd = ::open(atomic.temp.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw RuntimeError(errno_message("cannot write", atomic.temp));
    // Gathered small pieces are hashed and written from this buffer: cache-sized, so the write
    // reads it from cache after the hash.
    const size_t cap = narrow ? (1 << 17) : (1 << 16);
    if (narrow) buf16.resize(cap);
    else buf32.resize(cap);
    offsets.reserve(nd + 1);
    bytes.reserve(nd);
  }
  ~Impl() {
    if (fd >= 0) ::close(fd);
    XXH64_freeState(hash);
  }

  void flush() {
    if (buffered == 0) return;
    const void* data = narrow ? static_cast<const void*>(buf16.data()) : buf32.data();
    size_t w = narrow ? 2 : 4;
    XXH64_update(hash, data, buffered * w);
    write_tokens(data, buffered * w);
    written += buffered;
    buffered = 0;
  }

  // Writes token bytes at the current end and starts their write-back early: the disk then works
  // while the next pieces are copied, and finish()'s fsync waits only for the tail (without this the
  // kernel starts write-back at its dirty thresholds, typically gigabytes, and all of it waits for
  // the fsync).
  void write_tokens(const void* data, size_t n) {
    const uint64_t at = static_cast<uint64_t>(tokens_off) + written * (narrow ? 2 : 4);
    pwrite_all(fd, data, n, at, atomic.temp);
    unsynced += n;
    if (unsynced >= kWriteBehind) {
#ifdef __linux__
      const uint64_t end = at + n;
      ::sync_file_range(fd, static_cast<off_t>(end - unsynced), static_cast<off_t>(unsynced), SYNC_FILE_RANGE_WRITE);
#endif
      unsynced = 0;
    }
  }
  static constexpr size_t kWriteBehind = size_t{8} << 20;
  size_t unsynced = 0;  // bytes written since the last write-back request
  bool ids_checked = false;
};

ShardWriter::ShardWriter(const std::string& path, const ShardMeta& meta, uint64_t num_tokens, uint64_t num_documents)
    : impl_(std::make_unique<Impl>(path, meta, num_tokens, num_documents)) {}

ShardWriter::~ShardWriter() = default;

void ShardWriter::append_tokens(const uint32_t* tokens, size_t n) {
  Impl& m = *impl_;
  if (m.written + m.buffered + n > m.num_tokens)
    throw RuntimeError(file_message("cannot write", m.path, "more tokens than planned (internal error)"));
  const uint32_t vocab = m.meta.vocab_size;
  while (n > 0) {
    size_t cap = m.narrow ? m.buf16.size() : m.buf32.size();
    size_t take = std::min(n, cap - m.buffered);
    uint32_t bad = 0;
    if (m.narrow) {
      uint16_t* dst = m.buf16.data() + m.buffered;
      for (size_t i = 0; i < take; ++i) {
        bad |= static_cast<uint32_t>(tokens[i] >= vocab);
        dst[i] = static_cast<uint16_t>(tokens[i]);
      }
    } else {
      uint32_t* dst = m.buf32.data() + m.buffered;
      for (size_t i = 0; i < take; ++i) bad |= static_cast<uint32_t>(tokens[i] >= vocab);
      std::memcpy(dst, tokens, take * 4);
    }
    if (bad) {
      for (size_t i = 0; i < take; ++i)
        if (tokens[i] >= vocab)
          throw UsageError(
              file_message("cannot write", m.path,
                           strprintf("token id %u at position %llu is not below the vocabulary size %u", tokens[i],
                                     static_cast<unsigned long long>(m.written) + m.buffered + i, vocab)));
    }
    m.buffered += take;
    tokens += take;
    n -= take;
    if (m.buffered == cap) m.flush();
  }
}

void ShardWriter::append_raw(const void* tokens, size_t n, int width) {
  Impl& m = *impl_;
  const int stored = m.narrow ? 2 : 4;
  if (width != stored) {  // different layout: widen and go through the checked buffer
    std::vector<uint32_t> wide(n);
    if (width == 2)
      for (size_t i = 0; i < n; ++i) wide[i] = static_cast<const uint16_t*>(tokens)[i];
    else std::memcpy(wide.data(), tokens, n * 4);
    return append_tokens(wide.data(), n);
  }
  if (m.written + m.buffered + n > m.num_tokens)
    throw RuntimeError(file_message("cannot write", m.path, "more tokens than planned (internal error)"));
  // Ids must stay below the vocabulary (skip the scan when every uint16 value is allowed, or when
  // the caller has checked them, e.g. input shards verified before a reshard).
  if (!m.ids_checked && !(m.narrow && m.meta.vocab_size >= 65536)) {
    uint32_t mx = 0;
    if (m.narrow) {
      const auto* p = static_cast<const uint16_t*>(tokens);
      for (size_t i = 0; i < n; ++i) mx = std::max<uint32_t>(mx, p[i]);
    } else {
      const auto* p = static_cast<const uint32_t*>(tokens);
      for (size_t i = 0; i < n; ++i) mx = std::max(mx, p[i]);
    }
    if (n > 0 && mx >= m.meta.vocab_size) {
      std::vector<uint32_t> wide(n);
      for (size_t i = 0; i < n; ++i)
        wide[i] = m.narrow ? static_cast<const uint16_t*>(tokens)[i] : static_cast<const uint32_t*>(tokens)[i];
      return append_tokens(wide.data(), n);  // reports the offending token
    }
  }
  if (n < (1u << 15)) {  // small pieces (shuffled documents) are gathered in the buffer
    const char* src = static_cast<const char*>(tokens);
    while (n > 0) {
      size_t cap = m.narrow ? m.buf16.size() : m.buf32.size();
      size_t take = std::min(n, cap - m.buffered);
      char* dst = m.narrow ? reinterpret_cast<char*>(m.buf16.data() + m.buffered)
                           : reinterpret_cast<char*>(m.buf32.data() + m.buffered);
      std::memcpy(dst, src, take * stored);
      m.buffered += take;
      src += take * stored;
      n -= take;
      if (m.buffered == cap) m.flush();
    }
    return;
  }
  m.flush();
  // Hash and write in cache-sized steps, so the source is read from memory once for both.
  const char* src = static_cast<const char*>(tokens);
  const size_t step = (size_t{256} << 10) / stored;
  for (size_t o = 0; o < n; o += step) {
    const size_t c = std::min(step, n - o);
    XXH64_update(m.hash, src + o * stored, c * stored);
    m.write_tokens(src + o * stored, c * stored);
    m.written += c;
  }
}

void ShardWriter::set_ids_checked(bool checked) { impl_->ids_checked = checked; }

void ShardWriter::append_document(uint64_t tokens_in_doc, uint32_t source_bytes) {
  impl_->offsets.push_back(impl_->offsets.back() + tokens_in_doc);
  impl_->bytes.push_back(source_bytes);
}

ShardInfo ShardWriter::finish() {
  ShardInfo info = finish_pending();
  commit();
  return info;
}

void ShardWriter::commit() { impl_->atomic.commit(); }

ShardInfo ShardWriter::finish_pending() {
  Impl& m = *impl_;
  m.flush();
  if (m.written != m.num_tokens || m.bytes.size() != m.num_documents || m.offsets.back() != m.num_tokens)
    throw RuntimeError(file_message("cannot write", m.path,
                                    strprintf("wrote %llu tokens / %zu documents, planned %llu / %llu (internal error)",
                                              static_cast<unsigned long long>(m.written), m.bytes.size(),
                                              static_cast<unsigned long long>(m.num_tokens),
                                              static_cast<unsigned long long>(m.num_documents))));
  const std::string& tmp = m.atomic.temp;
  if (m.offsets_off >= 0) pwrite_all(m.fd, m.offsets.data(), m.offsets.size() * 8, m.offsets_off, tmp);
  if (m.bytes_off >= 0) pwrite_all(m.fd, m.bytes.data(), m.bytes.size() * 4, m.bytes_off, tmp);
  if (::close(m.fd) != 0) {
    m.fd = -1;
    throw RuntimeError(errno_message("cannot write", tmp));
  }
  m.fd = -1;
  uint64_t h = XXH64_digest(m.hash);
  {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    h5::File f = h5::File::open(tmp, h5::Mode::ReadWrite);
    f.set_attr("tokens_xxh64", h);
    f.close();
  }
  m.atomic.start_writeback();
  ShardInfo info;
  info.file = std::filesystem::path(m.path).filename().string();
  info.tokens = m.num_tokens;
  info.documents = m.num_documents;
  info.xxh64 = h;
  return info;
}

}  // namespace cairn::shards
