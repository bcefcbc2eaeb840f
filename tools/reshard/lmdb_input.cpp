// LMDB environments as build inputs: every value of the main database, in key order, is a document
// (raw text, or with --format jsonl a JSON object holding the text field). Opened read-only without
// the lock file, so inputs are never written.
#include <lmdb.h>
#include <sys/mman.h>

#include <filesystem>

#include "cairn/error.h"
#include "cairn/files.h"
#include "reshard.h"

namespace cairn::reshard {

namespace fs = std::filesystem;

bool is_lmdb_path(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return fs::is_regular_file(fs::path(path) / "data.mdb", ec);
  return path.size() > 4 && path.compare(path.size() - 4, 4, ".mdb") == 0 &&
         path.rfind("lock.mdb") != path.size() - 8 && fs::is_regular_file(path, ec);
}

struct LmdbInput::Impl {
  std::string path;
  MDB_env* env = nullptr;
  MDB_txn* txn = nullptr;
  MDB_cursor* cursor = nullptr;
  MDB_dbi dbi = 0;
  bool started = false;
  uint64_t bytes = 0, since_release = 0;
  void* map = nullptr;
  size_t map_size = 0;

  void check(int rc, const char* what) {
    if (rc != MDB_SUCCESS) throw UsageError(file_message(what, path, mdb_strerror(rc)));
  }
  ~Impl() {
    if (cursor) mdb_cursor_close(cursor);
    if (txn) mdb_txn_abort(txn);
    if (env) mdb_env_close(env);
  }
};

LmdbInput::LmdbInput(const std::string& path) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  std::error_code ec;
  const bool subdir = fs::is_directory(path, ec);
  m.check(mdb_env_create(&m.env), "cannot open LMDB input");
  m.check(mdb_env_set_maxdbs(m.env, 1), "cannot open LMDB input");  // to tell a named database from a value
  // MDB_NOLOCK: reading needs no lock file (none is created next to the input); the environment
  // must not be written while cairn reads it, like any input.
  m.check(mdb_env_open(m.env, path.c_str(), MDB_RDONLY | MDB_NOLOCK | MDB_NORDAHEAD | (subdir ? 0 : MDB_NOSUBDIR),
                       0444),
          "cannot open LMDB input");
  m.check(mdb_txn_begin(m.env, nullptr, MDB_RDONLY, &m.txn), "cannot read LMDB input");
  m.check(mdb_dbi_open(m.txn, nullptr, 0, &m.dbi), "cannot read LMDB input");
  m.check(mdb_cursor_open(m.txn, m.dbi, &m.cursor), "cannot read LMDB input");
  MDB_envinfo info{};
  if (mdb_env_info(m.env, &info) == MDB_SUCCESS) {
    m.map = info.me_mapaddr;
    m.map_size = info.me_mapsize;
  }
}

LmdbInput::~LmdbInput() = default;

bool LmdbInput::next(std::string_view& value) {
  Impl& m = *impl_;
  MDB_val k{}, v{};
  int rc = mdb_cursor_get(m.cursor, &k, &v, m.started ? MDB_NEXT : MDB_FIRST);
  m.started = true;
  if (rc == MDB_NOTFOUND) return false;
  m.check(rc, "corrupt LMDB input");
  // A named database lives in the main one as a 48-byte record of its root page (MDB_db): read as a value, it
  // would be a 48-byte "document" of mostly NUL bytes, and the database's own records would be missed.
  if (v.mv_size == 48) {
    const std::string name(static_cast<const char*>(k.mv_data), k.mv_size);
    MDB_dbi named = 0;
    if (name.find('\0') == std::string::npos && mdb_dbi_open(m.txn, name.c_str(), 0, &named) == MDB_SUCCESS)
      throw UsageError(file_message("unsupported LMDB input", m.path,
                                    "it holds the named database \"" + name +
                                        "\"; cairn reads the records of an environment's main database only"));
  }
  value = std::string_view(static_cast<const char*>(v.mv_data), v.mv_size);
  m.bytes += v.mv_size;
  m.since_release += v.mv_size;
  return true;
}

void LmdbInput::release_read_pages() {
  Impl& m = *impl_;
  // Values are copied out as they are read; dropping the map's pages keeps resident memory bounded
  // however large the environment (they stay in the page cache; LMDB maps them again if needed).
  if (m.since_release < (size_t{64} << 20) || !m.map) return;
  m.since_release = 0;
  ::madvise(m.map, m.map_size, MADV_DONTNEED);
}

uint64_t LmdbInput::bytes_read() const { return impl_->bytes; }

}  // namespace cairn::reshard
