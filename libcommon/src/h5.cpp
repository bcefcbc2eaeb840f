// RAII wrappers over the HDF5 C API with errors that name the file and object.
#include "cairn/h5.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "cairn/error.h"
#include "cairn/provenance.h"

namespace cairn::h5 {

namespace {

herr_t collect_error(unsigned n, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (n == 0 && err && err->desc) *out = err->desc;
  return 0;
}

// The most specific message on HDF5's error stack (e.g. "unable to open file").
std::string h5_reason() {
  std::string reason;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_error, &reason);
  H5Eclear2(H5E_DEFAULT);
  // A failed system call's description lists time, buffer address, byte counts... around the system's message
  // ("file write failed: time = ..., errno = 28, error message = 'No space left on device', buf = 0x..."): keep
  // what a user acts on, "file write failed: No space left on device".
  const std::string key = "error message = '";
  if (size_t at = reason.find(key); at != std::string::npos) {
    const size_t from = at + key.size(), to = reason.find('\'', from);
    const size_t colon = reason.find(':');
    if (to != std::string::npos && colon != std::string::npos && colon < at)
      reason = reason.substr(0, colon) + ": " + reason.substr(from, to - from);
  }
  // A failed write's description embeds ctime()'s newline: keep the error on one line.
  std::replace(reason.begin(), reason.end(), '\n', ' ');
  return reason.empty() ? "HDF5 error" : reason;
}

Handle vlen_string_type() {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  return Handle(t, H5Tclose);
}

Handle link_create_props() {
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  return Handle(lcpl, H5Pclose);
}

}  // namespace

void silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

[[noreturn]] void throw_h5(const std::string& what, const std::string& path) {
  throw RuntimeError(file_message(what, path, h5_reason()));
}

namespace {
bool g_close_failed = false;
}  // namespace

bool close_failed() { return g_close_failed; }

void Handle::reset() {
  if (id_ >= 0 && closer_ && closer_(id_) < 0 && closer_ == H5Fclose) g_close_failed = true;
  id_ = H5I_INVALID_HID;
}

// ---------------------------------------------------------------- Location

bool Location::exists(const std::string& name) const {
  // H5Lexists needs every intermediate link to exist, so check component by component.
  std::string partial;
  size_t start = 0;
  while (start <= name.size()) {
    size_t slash = name.find('/', start);
    std::string part = name.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (!part.empty()) {
      partial += (partial.empty() ? "" : "/") + part;
      htri_t e = H5Lexists(id(), partial.c_str(), H5P_DEFAULT);
      if (e <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return false;
      }
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return true;
}

Group Location::group(const std::string& name) const {
  hid_t g = H5Gopen2(id(), name.c_str(), H5P_DEFAULT);
  if (g < 0) throw_h5("cannot open group", path_ + "/" + name);
  return Group(Handle(g, H5Gclose), path_ + "/" + name);
}

Group Location::create_group(const std::string& name) const {
  if (exists(name)) return group(name);
  Handle lcpl = link_create_props();
  hid_t g = H5Gcreate2(id(), name.c_str(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT);
  if (g < 0) throw_h5("cannot create group", path_ + "/" + name);
  return Group(Handle(g, H5Gclose), path_ + "/" + name);
}

void Location::check_header_once() const {
  if (header_checked_) return;
  check_object_header(*this);
  header_checked_ = true;
}

Dataset Location::dataset(const std::string& name) const {
  check_object_header(*this, name);
  hid_t d = H5Dopen2(id(), name.c_str(), H5P_DEFAULT);
  if (d < 0) throw_h5("cannot open dataset", path_ + "/" + name);
  Dataset ds(Handle(d, H5Dclose), path_ + "/" + name);
  ds.header_checked_ = true;
  check_dataset_storage(ds);
  return ds;
}

Handle create_dataset_raw(const Location& loc, const std::string& name, hid_t type, const std::vector<hsize_t>& dims) {
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  if (!space.valid()) throw_h5("cannot create dataspace for", loc.path() + "/" + name);
  Handle lcpl = link_create_props();
  hid_t d = H5Dcreate2(loc.id(), name.c_str(), type, space.id(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT);
  if (d < 0) throw_h5("cannot create dataset", loc.path() + "/" + name);
  return Handle(d, H5Dclose);
}

void write_raw(const Dataset& ds, hid_t mem_type, const void* data) {
  if (ds.size() == 0) return;
  if (H5Dwrite(ds.id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) throw_h5("cannot write", ds.path());
}

void read_raw(const Dataset& ds, hid_t mem_type, void* data) {
  if (H5Dread(ds.id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) throw_h5("cannot read", ds.path());
}

namespace {

// The file space of 1-D dataset `ds` with [offset, offset + count) selected; `what` ("read", "write") for errors.
Handle select_range(const Dataset& ds, hsize_t offset, hsize_t count, const char* what) {
  hsize_t n = ds.size();
  if (offset > n || count > n - offset) {
    throw RuntimeError(file_message(std::string("cannot ") + what, ds.path(),
                                    "range [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                                        ") is outside its " + std::to_string(n) + " elements"));
  }
  Handle fspace(H5Dget_space(ds.id()), H5Sclose);
  if (H5Sselect_hyperslab(fspace.id(), H5S_SELECT_SET, &offset, nullptr, &count, nullptr) < 0) {
    throw_h5("cannot select range in", ds.path());
  }
  return fspace;
}

}  // namespace

void read_range_raw(const Dataset& ds, hid_t mem_type, hsize_t offset, hsize_t count, void* out) {
  Handle fspace = select_range(ds, offset, count, "read");
  Handle mspace(H5Screate_simple(1, &count, nullptr), H5Sclose);
  if (H5Dread(ds.id(), mem_type, mspace.id(), fspace.id(), H5P_DEFAULT, out) < 0) throw_h5("cannot read", ds.path());
}

void write_range_raw(const Dataset& ds, hid_t mem_type, hsize_t offset, hsize_t count, const void* data) {
  if (count == 0) return;
  Handle fspace = select_range(ds, offset, count, "write");
  Handle mspace(H5Screate_simple(1, &count, nullptr), H5Sclose);
  if (H5Dwrite(ds.id(), mem_type, mspace.id(), fspace.id(), H5P_DEFAULT, data) < 0) throw_h5("cannot write", ds.path());
}

void Location::write_strings(const std::string& name, const std::vector<std::string>& values) const {
  Handle type = vlen_string_type();
  std::vector<const char*> ptrs;
  ptrs.reserve(values.size());
  for (const auto& v : values) ptrs.push_back(v.c_str());
  Dataset ds(create_dataset_raw(*this, name, type.id(), {values.size()}), path_ + "/" + name);
  if (!values.empty() && H5Dwrite(ds.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) < 0) {
    throw_h5("cannot write", ds.path());
  }
}

std::vector<std::string> Location::read_strings(const std::string& name) const {
  Dataset ds = dataset(name);
  hsize_t n = ds.size();
  std::vector<std::string> out;
  if (n == 0) return out;
  Handle type = vlen_string_type();
  std::vector<char*> ptrs(n, nullptr);
  if (H5Dread(ds.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) < 0) throw_h5("cannot read", ds.path());
  out.reserve(n);
  for (char* p : ptrs) out.emplace_back(p ? p : "");
  Handle space(H5Dget_space(ds.id()), H5Sclose);
  H5Dvlen_reclaim(type.id(), space.id(), H5P_DEFAULT, ptrs.data());
  return out;
}

// ---------------------------------------------------------------- attributes

bool Location::has_attr(const std::string& name) const {
  check_header_once();
  htri_t e = H5Aexists(id(), name.c_str());
  if (e < 0) H5Eclear2(H5E_DEFAULT);
  return e > 0;
}

namespace {
Handle recreate_attr(const Location& loc, const std::string& name, hid_t type) {
  if (loc.has_attr(name)) H5Adelete(loc.id(), name.c_str());
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  hid_t a = H5Acreate2(loc.id(), name.c_str(), type, space.id(), H5P_DEFAULT, H5P_DEFAULT);
  if (a < 0) throw_h5("cannot create attribute '" + name + "' on", loc.path());
  return Handle(a, H5Aclose);
}

Handle open_attr(const Location& loc, const std::string& name) {
  hid_t a = H5Aopen(loc.id(), name.c_str(), H5P_DEFAULT);
  if (a < 0) throw_h5("missing attribute '" + name + "' on", loc.path());
  return Handle(a, H5Aclose);
}

template <typename T>
void write_scalar_attr(const Location& loc, const std::string& name, T value) {
  Handle a = recreate_attr(loc, name, native_type<T>());
  if (H5Awrite(a.id(), native_type<T>(), &value) < 0) throw_h5("cannot write attribute '" + name + "' on", loc.path());
}

template <typename T>
T read_scalar_attr(const Location& loc, const std::string& name) {
  loc.check_header_once();
  Handle a = open_attr(loc, name);
  T value{};
  if (H5Aread(a.id(), native_type<T>(), &value) < 0) throw_h5("cannot read attribute '" + name + "' on", loc.path());
  return value;
}

herr_t collect_attr_name(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}
}  // namespace

void Location::set_attr(const std::string& name, const std::string& value) const {
  Handle type = vlen_string_type();
  Handle a = recreate_attr(*this, name, type.id());
  const char* p = value.c_str();
  if (H5Awrite(a.id(), type.id(), &p) < 0) throw_h5("cannot write attribute '" + name + "' on", path_);
}
void Location::set_attr(const std::string& name, double value) const { write_scalar_attr(*this, name, value); }
void Location::set_attr(const std::string& name, int64_t value) const { write_scalar_attr(*this, name, value); }
void Location::set_attr(const std::string& name, uint64_t value) const { write_scalar_attr(*this, name, value); }

std::string Location::attr_string(const std::string& name) const {
  check_header_once();
  Handle a = open_attr(*this, name);
  Handle ftype(H5Aget_type(a.id()), H5Tclose);
  if (H5Tget_class(ftype.id()) != H5T_STRING) {
    throw RuntimeError(file_message("attribute '" + name + "' is not a string on", path_, "wrong type"));
  }
  if (H5Tis_variable_str(ftype.id()) > 0) {
    Handle type = vlen_string_type();
    char* p = nullptr;
    if (H5Aread(a.id(), type.id(), &p) < 0) throw_h5("cannot read attribute '" + name + "' on", path_);
    std::string out = p ? p : "";
    if (p) H5free_memory(p);
    return out;
  }
  size_t n = H5Tget_size(ftype.id());
  std::string buf(n, '\0');
  Handle mtype(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mtype.id(), n);
  if (H5Aread(a.id(), mtype.id(), buf.data()) < 0) throw_h5("cannot read attribute '" + name + "' on", path_);
  buf.resize(std::strlen(buf.c_str()));
  return buf;
}
double Location::attr_double(const std::string& name) const { return read_scalar_attr<double>(*this, name); }
int64_t Location::attr_int(const std::string& name) const { return read_scalar_attr<int64_t>(*this, name); }
uint64_t Location::attr_uint(const std::string& name) const { return read_scalar_attr<uint64_t>(*this, name); }

std::vector<std::string> Location::attr_names() const {
  check_header_once();
  std::vector<std::string> names;
  hsize_t idx = 0;
  H5Aiterate2(id(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr_name, &names);
  return names;
}

// ---------------------------------------------------------------- Dataset

std::vector<hsize_t> Dataset::dims() const {
  Handle space(H5Dget_space(id()), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(space.id());
  std::vector<hsize_t> d(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space.id(), d.data(), nullptr);
  return d;
}

hsize_t Dataset::size() const {
  Handle space(H5Dget_space(id()), H5Sclose);
  hssize_t n = H5Sget_simple_extent_npoints(space.id());
  return n < 0 ? 0 : static_cast<hsize_t>(n);
}

int64_t Dataset::contiguous_offset() const {
  haddr_t off = H5Dget_offset(id());
  if (off == HADDR_UNDEF) {
    H5Eclear2(H5E_DEFAULT);
    return -1;
  }
  return static_cast<int64_t>(off);
}

hid_t Dataset::file_type() const { return H5Dget_type(id()); }

bool Dataset::is_type(hid_t native) const {
  Handle t(H5Dget_type(id()), H5Tclose);
  if (H5Tget_class(t.id()) != H5Tget_class(native)) return false;
  if (H5Tget_size(t.id()) != H5Tget_size(native)) return false;
  if (H5Tget_class(native) == H5T_INTEGER && H5Tget_sign(t.id()) != H5Tget_sign(native)) return false;
  return true;
}

// ---------------------------------------------------------------- File

namespace {
void check_openable(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw RuntimeError(errno_message("cannot open", path));
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw RuntimeError(file_message("cannot open", path, "not an HDF5 file"));
  }
}
}  // namespace

File File::open(const std::string& path, Mode mode) {
  silence_errors();
  if (mode == Mode::Create) return create(path);
  check_openable(path);
  hid_t f = H5Fopen(path.c_str(), mode == Mode::Read ? H5F_ACC_RDONLY : H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) throw_h5("cannot open", path);
  File file(Handle(f, H5Fclose), path);
  file.check_header_once();
  return file;
}

File File::create(const std::string& path) {
  silence_errors();
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) throw_h5("cannot create", path);
  return File(Handle(f, H5Fclose), path);
}

File File::open_parallel(const std::string& path, Mode mode, MPI_Comm comm) {
  silence_errors();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_mpio(fapl.id(), comm, MPI_INFO_NULL);
  hid_t f;
  if (mode == Mode::Create) {
    f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id());
    if (f < 0) throw_h5("cannot create", path);
  } else {
    check_openable(path);
    f = H5Fopen(path.c_str(), mode == Mode::Read ? H5F_ACC_RDONLY : H5F_ACC_RDWR, fapl.id());
    if (f < 0) throw_h5("cannot open", path);
  }
  return File(Handle(f, H5Fclose), path);
}

void File::flush() const {
  if (H5Fflush(id(), H5F_SCOPE_GLOBAL) < 0) throw_h5("cannot flush", path_);
}

// A file written to is flushed first: H5Fclose's own write errors (a full disk) are only a return code, and a
// writer that committed the file after a silent failure (cairn-eval's results.h5) put an unreadable file in place
// of a good one. The flush throws naming the file; so does a close that fails.
void File::close() {
  if (!h_.valid()) return;
  unsigned intent = 0;
  if (H5Fget_intent(h_.id(), &intent) >= 0 && (intent & H5F_ACC_RDWR)) flush();
  const bool failed_before = g_close_failed;
  h_.reset();
  if (g_close_failed && !failed_before) throw_h5("cannot close", path_);
}

void write_provenance(const Location& loc) {
  const Provenance& p = provenance();
  loc.set_attr("tool", p.tool);
  loc.set_attr("version", p.version);
  loc.set_attr("git_sha", p.git_sha);
  loc.set_attr("host", p.host);
  loc.set_attr("time_utc", p.time_utc);
  loc.set_attr("command_line", p.command_line);
  loc.set_attr("config", p.config_toml);
}

}  // namespace cairn::h5
