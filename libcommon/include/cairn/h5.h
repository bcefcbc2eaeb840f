// Thin RAII wrappers over the HDF5 C API: files, groups, datasets, attributes, typed I/O.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <hdf5.h>

namespace cairn::h5 {

// Owns one hid_t and closes it with the matching H5*close.
class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*closer)(hid_t)) : id_(id), closer_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
  herr_t (*closer_)(hid_t) = nullptr;
};

template <typename T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
  else if constexpr (std::is_same_v<T, int8_t>) return H5T_NATIVE_INT8;
  else if constexpr (std::is_same_v<T, uint8_t>) return H5T_NATIVE_UINT8;
  else if constexpr (std::is_same_v<T, int16_t>) return H5T_NATIVE_INT16;
  else if constexpr (std::is_same_v<T, uint16_t>) return H5T_NATIVE_UINT16;
  else if constexpr (std::is_same_v<T, int32_t>) return H5T_NATIVE_INT32;
  else if constexpr (std::is_same_v<T, uint32_t>) return H5T_NATIVE_UINT32;
  else if constexpr (std::is_same_v<T, int64_t>) return H5T_NATIVE_INT64;
  else if constexpr (std::is_same_v<T, uint64_t>) return H5T_NATIVE_UINT64;
  else static_assert(sizeof(T) == 0, "no HDF5 native type for T");
}

class Group;
class Dataset;

// A group or file location: datasets, attributes and subgroups hang off it.
class Location {
 public:
  hid_t id() const { return h_.id(); }
  bool valid() const { return h_.valid(); }
  const std::string& path() const { return path_; }  // file path + object path, for errors

  bool exists(const std::string& name) const;         // link exists (one level or a/b/c)
  Group group(const std::string& name) const;         // open existing
  Group create_group(const std::string& name) const;  // create (parents too)
  Dataset dataset(const std::string& name) const;     // open existing

  // 1-D (or shaped) dataset from a vector; contiguous layout unless chunk > 0.
  template <typename T>
  Dataset write(const std::string& name, const std::vector<T>& data, const std::vector<hsize_t>& dims = {}) const;
  template <typename T>
  std::vector<T> read(const std::string& name) const;
  // Strings dataset (variable-length UTF-8).
  void write_strings(const std::string& name, const std::vector<std::string>& values) const;
  std::vector<std::string> read_strings(const std::string& name) const;

  // Attributes on this object.
  bool has_attr(const std::string& name) const;
  void set_attr(const std::string& name, const std::string& value) const;
  void set_attr(const std::string& name, const char* value) const { set_attr(name, std::string(value)); }
  void set_attr(const std::string& name, double value) const;
  void set_attr(const std::string& name, int64_t value) const;
  void set_attr(const std::string& name, uint64_t value) const;
  void set_attr(const std::string& name, int value) const { set_attr(name, static_cast<int64_t>(value)); }
  std::string attr_string(const std::string& name) const;
  double attr_double(const std::string& name) const;
  int64_t attr_int(const std::string& name) const;
  uint64_t attr_uint(const std::string& name) const;
  std::vector<std::string> attr_names() const;
  // check_object_header(*this) the first time (the accessors above call it).
  void check_header_once() const;

 protected:
  Location() = default;
  Location(Handle h, std::string path) : h_(std::move(h)), path_(std::move(path)) {}
  Handle h_;
  std::string path_;
  mutable bool header_checked_ = false;  // check_object_header passed (read-only files)
};

class Group : public Location {
 public:
  Group() = default;
  Group(Handle h, std::string path) : Location(std::move(h), std::move(path)) {}
};

class Dataset : public Location {
 public:
  Dataset() = default;
  Dataset(Handle h, std::string path) : Location(std::move(h), std::move(path)) {}
  std::vector<hsize_t> dims() const;
  hsize_t size() const;  // total elements
  // Reads `count` elements starting at `offset` of a 1-D dataset (a hyperslab).
  template <typename T>
  std::vector<T> read_range(hsize_t offset, hsize_t count) const;
  template <typename T>
  void read_range_into(hsize_t offset, hsize_t count, T* out) const;
  template <typename T>
  std::vector<T> read_all() const;
  // Byte offset of the raw data in the file for contiguous datasets (for mmap readers); -1 if none.
  int64_t contiguous_offset() const;
  hid_t file_type() const;           // caller closes with H5Tclose
  bool is_type(hid_t native) const;  // class and size equal to native type
};

// Before HDF5 1.10 decodes a read-only file's object header (version 1, no checksum: the format cairn writes):
// its dataspace, datatype and attribute messages fit where they are, its types are ones cairn writes, and every
// variable-length string attribute points at a whole heap object of its length. HDF5 itself trusts all of these
// (a flipped byte hangs H5Aopen, or crashes H5Dopen and H5Aread); damage throws RuntimeError naming the file.
// File::open, Location::dataset and the attribute accessors call these; the second checks `parent`'s child
// `name` before it is opened.
void check_object_header(const Location& loc);
void check_object_header(const Location& parent, const std::string& name);
// A contiguous or compact dataset of a read-only file holds exactly its elements (a damaged dataspace would have
// readers allocate and read what is not there); Location::dataset calls it.
void check_dataset_storage(const Dataset& ds);

enum class Mode { Read, ReadWrite, Create /* truncate */ };

class File : public Location {
 public:
  File() = default;
  // Serial open/create. Errors name the path: `cannot open "x.h5": not an HDF5 file`.
  static File open(const std::string& path, Mode mode = Mode::Read);
  static File create(const std::string& path);
  // Parallel (MPI-IO) open/create over `comm`; collective.
  static File open_parallel(const std::string& path, Mode mode, MPI_Comm comm);
  void flush() const;
  void close();

 private:
  File(Handle h, std::string path) : Location(std::move(h), std::move(path)) {}
};

// Writes the process-wide provenance (tool, version, git_sha, host, time, command_line, config)
// as attributes on `loc` (usually the file root).
void write_provenance(const Location& loc);

// Turns HDF5's own error stack printing off (we report errors ourselves); called by Session/run_tool.
void silence_errors();
// True once an HDF5 file failed to close (a full disk: its metadata could not be flushed). HDF5 keeps such a file
// open, and its own clean-up at exit then crashes on it (segfault after the error was reported): run_tool ends the
// process without that clean-up when this is set.
bool close_failed();

}  // namespace cairn::h5

#include "cairn/h5_impl.h"
