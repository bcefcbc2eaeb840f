// Template definitions for cairn/h5.h (typed dataset reads and writes).
#pragma once
#include "cairn/h5.h"

namespace cairn::h5 {

// Non-template helpers implemented in h5.cpp.
Handle create_dataset_raw(const Location& loc, const std::string& name, hid_t type, const std::vector<hsize_t>& dims);
void write_raw(const Dataset& ds, hid_t mem_type, const void* data);
void read_raw(const Dataset& ds, hid_t mem_type, void* data);
void read_range_raw(const Dataset& ds, hid_t mem_type, hsize_t offset, hsize_t count, void* out);
// Writes `count` elements at `offset` of a 1-D dataset (a hyperslab): datasets filled piece by piece.
void write_range_raw(const Dataset& ds, hid_t mem_type, hsize_t offset, hsize_t count, const void* data);
[[noreturn]] void throw_h5(const std::string& what, const std::string& path);

template <typename T>
Dataset Location::write(const std::string& name, const std::vector<T>& data, const std::vector<hsize_t>& dims) const {
  std::vector<hsize_t> shape = dims.empty() ? std::vector<hsize_t>{data.size()} : dims;
  Dataset ds(create_dataset_raw(*this, name, native_type<T>(), shape), path_ + "/" + name);
  write_raw(ds, native_type<T>(), data.data());
  return ds;
}

template <typename T>
std::vector<T> Location::read(const std::string& name) const {
  return dataset(name).template read_all<T>();
}

template <typename T>
std::vector<T> Dataset::read_all() const {
  std::vector<T> out(size());
  if (!out.empty()) read_raw(*this, native_type<T>(), out.data());
  return out;
}

template <typename T>
std::vector<T> Dataset::read_range(hsize_t offset, hsize_t count) const {
  std::vector<T> out(count);
  read_range_into<T>(offset, count, out.data());
  return out;
}

template <typename T>
void Dataset::read_range_into(hsize_t offset, hsize_t count, T* out) const {
  if (count == 0) return;
  read_range_raw(*this, native_type<T>(), offset, count, out);
}

}  // namespace cairn::h5
