// Checks a read-only file's object headers and dataset sizes against its bytes before HDF5 1.10 decodes them.
//
// HDF5 1.10 trusts what a version 1 object header (no checksum; the format every file cairn writes uses) says: one
// flipped byte in an attribute message's field sizes makes H5Aopen loop for ever, one in a variable-length string's
// reference (length, heap collection, object index) or in the heap collection it points to makes H5Aread loop or
// write past its buffer, one in a datatype or dataspace message crashes their decoders, and one in a dataset's
// dims has readers allocate terabytes. Read-only files get these checks first, so such a file fails with an error
// that names it. Version 2 headers carry a checksum HDF5 verifies itself.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <set>

#include "cairn/error.h"
#include "cairn/h5.h"
#include "cairn/log.h"

namespace cairn::h5 {

namespace {

// The file's bytes, read with pread (HDF5 keeps its own descriptor); addresses are relative to the base
// address (the user block's end), as HDF5 stores them.
class RawFile {
 public:
  RawFile(const std::string& path, uint64_t base) : path_(path), base_(base) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd_ < 0 || ::fstat(fd_, &st) != 0) {
      const RuntimeError e(errno_message("cannot read", path));
      if (fd_ >= 0) ::close(fd_);
      throw e;
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~RawFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;

  // n bytes at relative address `at`; false when they are not all inside the file.
  bool read(uint64_t at, size_t n, std::string& out) const {
    if (at > size_ || base_ > size_ - at || n > size_ - base_ - at) return false;
    out.resize(n);
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_, out.data() + done, n - done, static_cast<off_t>(base_ + at + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw RuntimeError(errno_message("cannot read", path_));
      done += static_cast<size_t>(r);
    }
    return true;
  }
  uint64_t size() const { return size_; }
  // Object sizes by index of the global heap collections already read (one header's strings share one).
  mutable std::map<uint64_t, std::map<uint64_t, uint64_t>> heaps;

 private:
  std::string path_;
  uint64_t base_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// HDF5 stores integers little-endian, as this host does (x86, arm).
uint64_t le(const std::string& b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t(static_cast<unsigned char>(b[at + i])) << (8 * i);
  return v;
}
uint64_t pad8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

struct Damage {
  std::string what;
};

// The objects' sizes by index in the global heap collection at `addr`, after checking that the collection is
// tiled exactly by its objects (each: index 2 bytes, references 2, reserved 4, size 8, data padded to 8;
// index 0 is the free space, whose size counts its own header; a tail too short for a header is free space).
std::map<uint64_t, uint64_t> heap_objects(const RawFile& f, uint64_t addr) {
  std::string head;
  if (!f.read(addr, 16, head) || head.compare(0, 4, "GCOL") != 0 || head[4] != 1)
    throw Damage{strprintf("no global heap collection at byte %llu", static_cast<unsigned long long>(addr))};
  const uint64_t len = le(head, 8, 8);
  std::string c;
  if (len < 16 || !f.read(addr, len, c))
    throw Damage{
        strprintf("global heap collection at byte %llu has a bad size", static_cast<unsigned long long>(addr))};
  std::map<uint64_t, uint64_t> objects;
  for (uint64_t p = 16; p < len && len - p >= 16;) {
    const uint64_t idx = le(c, p, 2), n = le(c, p + 8, 8), room = len - p;
    const uint64_t need = idx == 0 ? n : n > room ? room + 1 : 16 + pad8(n);
    if (need < 16 || need > room)
      throw Damage{strprintf("damaged global heap collection at byte %llu", static_cast<unsigned long long>(addr))};
    objects.emplace(idx, n);
    p += need;
  }
  return objects;
}

// The size of object `index` of the collection at `addr`.
uint64_t heap_object_size(const RawFile& f, uint64_t addr, uint64_t index) {
  auto cached = f.heaps.find(addr);
  if (cached == f.heaps.end()) cached = f.heaps.emplace(addr, heap_objects(f, addr)).first;
  auto object = cached->second.find(index);
  if (index == 0 || object == cached->second.end())
    throw Damage{strprintf("global heap collection at byte %llu has no object %llu",
                           static_cast<unsigned long long>(addr), static_cast<unsigned long long>(index))};
  return object->second;
}

// Elements of a dataspace message (version 1 or 2) of `n` bytes at `at` of `m`.
uint64_t dataspace_elements(const std::string& m, size_t at, size_t n) {
  if (n < 8) throw Damage{"short dataspace"};
  const int version = static_cast<unsigned char>(m[at]), rank = static_cast<unsigned char>(m[at + 1]);
  const int flags = static_cast<unsigned char>(m[at + 2]);
  size_t dims_at;
  if (version == 1) {
    dims_at = at + 8;
  } else if (version == 2) {
    const int type = static_cast<unsigned char>(m[at + 3]);
    if (type == 0) return 1;  // scalar
    if (type == 2) return 0;  // null
    dims_at = at + 4;
  } else {
    throw Damage{strprintf("dataspace version %d", version)};
  }
  if (version == 1 && rank == 0) return 1;
  if (rank > 32 || dims_at + uint64_t(rank) * 8 * ((flags & 1) ? 2 : 1) > at + n) throw Damage{"bad dataspace"};
  uint64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    const uint64_t d = le(m, dims_at + 8 * i, 8);
    if (d != 0 && count > UINT64_MAX / d) throw Damage{"bad dataspace"};
    count *= d;
  }
  return count;
}

enum class Datatype { Other, VlenString };

// A datatype message (`n` bytes at `at` of `m`) of `what`: version in the high 4 bits of its first byte, class in
// the low 4, 3 bytes of class bits, size (4), properties. HDF5 decodes a damaged compound, enum or array type into
// wild reads, and cairn writes none: only the classes cairn writes pass (integers, floats, fixed-length strings,
// variable-length strings of 1-byte characters).
Datatype check_datatype(const std::string& m, uint64_t at, uint64_t n, const std::string& what) {
  if (n < 8) throw Damage{what + " has a short datatype"};
  const int version = static_cast<unsigned char>(m[at]) >> 4, cls = static_cast<unsigned char>(m[at]) & 0x0F;
  const uint64_t size = le(m, at + 4, 4);
  if (version < 1 || version > 4) throw Damage{what + " has a bad datatype version"};
  if (cls == 0 || cls == 1) {  // fixed-point (4 bytes of properties) or floating-point (12)
    if ((size != 1 && size != 2 && size != 4 && size != 8) || n < 8u + (cls == 0 ? 4u : 12u))
      throw Damage{what + " has a bad number type"};
    return Datatype::Other;
  }
  if (cls == 3) {  // fixed-length string
    if (size == 0) throw Damage{what + " has a bad string type"};
    return Datatype::Other;
  }
  if (cls != 9) throw Damage{strprintf("%s has datatype class %d, which cairn does not read", what.c_str(), cls)};
  // Variable-length: class bits 0-3 say sequence (0) or string (1); 16 bytes per element in the file; the base
  // type, a whole datatype message, follows.
  const int base = static_cast<unsigned char>(m[at + 8]);
  if ((static_cast<unsigned char>(m[at + 1]) & 0x0F) != 1 || size != 16 || n < 16 || (base >> 4) < 1 ||
      (base >> 4) > 4 || (base & 0x0F) != 0 || le(m, at + 12, 4) != 1)
    throw Damage{what + " has a variable-length type other than a string"};
  return Datatype::VlenString;
}

// One attribute message (`n` bytes at `at` of `m`): its parts fit in it, and every variable-length string it
// holds points at a heap object at least as long as the string.
void check_attribute_message(const RawFile& f, const std::string& m, size_t at, size_t n) {
  if (n < 8) throw Damage{"attribute message too short"};
  const int version = static_cast<unsigned char>(m[at]), flags = static_cast<unsigned char>(m[at + 1]);
  const uint64_t name = le(m, at + 2, 2), dt = le(m, at + 4, 2), ds = le(m, at + 6, 2);
  uint64_t name_at, dt_at, ds_at, data_at;
  if (version == 1) {
    name_at = at + 8;
    dt_at = name_at + pad8(name);
    ds_at = dt_at + pad8(dt);
    data_at = ds_at + pad8(ds);
  } else if (version == 2 || version == 3) {
    name_at = at + (version == 3 ? 9 : 8);
    dt_at = name_at + name;
    ds_at = dt_at + dt;
    data_at = ds_at + ds;
  } else {
    throw Damage{strprintf("attribute message version %d", version)};
  }
  if (name == 0 || dt < 8 || data_at > at + n) throw Damage{"attribute message sizes exceed it"};
  if (m[name_at + name - 1] != '\0') throw Damage{"attribute name not terminated"};
  const std::string attr = "attribute '" + std::string(m.data() + name_at) + "'";
  if ((flags & 3) != 0) return;  // shared datatype or dataspace: stored elsewhere, HDF5 checks those
  uint64_t count;
  try {
    count = dataspace_elements(m, ds_at, ds);
  } catch (const Damage& d) {
    throw Damage{attr + ": " + d.what};
  }
  const uint64_t room = at + n - data_at;
  if (check_datatype(m, dt_at, dt, attr) != Datatype::VlenString) {
    const uint64_t width = le(m, dt_at + 4, 4);
    if (count > room / width) throw Damage{attr + " holds less data than its dataspace"};
    return;
  }
  // Each element: length (4 bytes), heap collection address (8), object index (4).
  if (count > room / 16) throw Damage{attr + " holds less data than its dataspace"};
  for (uint64_t i = 0; i < count; ++i) {
    const size_t e = data_at + 16 * i;
    const uint64_t length = le(m, e, 4), addr = le(m, e + 4, 8), index = le(m, e + 12, 4);
    if (length == 0 && (addr == 0 || addr == UINT64_MAX)) continue;  // an empty or null string
    try {
      const uint64_t size = heap_object_size(f, addr, index);
      if (size != length)
        throw Damage{strprintf("its length %llu does not match its heap object's %llu bytes",
                               static_cast<unsigned long long>(length), static_cast<unsigned long long>(size))};
    } catch (const Damage& d) {
      throw Damage{attr + ": " + d.what};
    }
  }
}

// A name HDF5 reports through `get` (H5Fget_name, H5Iget_name) for `id`; empty when it has none.
std::string h5_name(ssize_t (*get)(hid_t, char*, size_t), hid_t id) {
  ssize_t n = get(id, nullptr, 0);
  if (n <= 0) return "";
  std::string name(static_cast<size_t>(n) + 1, '\0');
  get(id, name.data(), name.size());
  name.resize(static_cast<size_t>(n));
  return name;
}
// The name the file `file_id` was opened by, and the path of object `id` inside its file ("/", "/tokens").
std::string file_path(hid_t file_id) { return h5_name(H5Fget_name, file_id); }
std::string name_in_file(hid_t id) {
  const std::string name = h5_name(H5Iget_name, id);
  return name.empty() ? "/" : name;
}

// The object header at `addr` of the read-only file `file_id`, for `object` (its path in the file): every
// dataspace, datatype and attribute message in it.
void check_header(hid_t file_id, haddr_t addr, const std::string& object) {
  const std::string path = file_path(file_id);
  if (path.empty()) return;
  hsize_t user_block = 0;
  if (hid_t fcpl = H5Fget_create_plist(file_id); fcpl >= 0) {
    H5Pget_userblock(fcpl, &user_block);
    H5Pclose(fcpl);
  }
  const RawFile f(path, user_block);
  auto damaged = [&](const std::string& why) {
    return RuntimeError(file_message("cannot read", path, "damaged HDF5 object header of " + object + ": " + why));
  };
  std::string prefix;
  if (!f.read(addr, 16, prefix)) throw damaged("header outside the file");
  if (prefix.compare(0, 4, "OHDR") == 0 || prefix[0] != 1) return;  // version 2 (checksummed) or not one we read
  // Version 1: version, reserved, message count (2), reference count (4), size of the first block (4), padding
  // to 8. Messages: type (2), size (2), flags (1; bit 1: shared, stored elsewhere), reserved (3), data; a
  // continuation message (type 0x10) names one more block (address, length).
  std::vector<std::pair<uint64_t, uint64_t>> blocks{{addr + 16, le(prefix, 8, 4)}};
  std::set<uint64_t> seen;
  try {
    for (size_t b = 0; b < blocks.size(); ++b) {
      const auto [at, len] = blocks[b];
      if (blocks.size() > 4096 || !seen.insert(at).second) throw Damage{"header continuation blocks loop"};
      std::string m;
      if (len > f.size() || !f.read(at, len, m)) throw Damage{"header block outside the file"};
      for (uint64_t p = 0; p + 8 <= len;) {
        const uint64_t type = le(m, p, 2), size = le(m, p + 2, 2);
        const bool shared = (static_cast<unsigned char>(m[p + 4]) & 2) != 0;
        if (size > len - p - 8) throw Damage{"header message larger than its block"};
        if (type == 0x10) {
          if (size < 16) throw Damage{"short continuation message"};
          blocks.emplace_back(le(m, p + 8, 8), le(m, p + 16, 8));
        } else if (type == 0x01 && !shared) {
          dataspace_elements(m, p + 8, size);
        } else if (type == 0x03 && !shared) {
          check_datatype(m, p + 8, size, "the object");
        } else if (type == 0x0C) {
          check_attribute_message(f, m, p + 8, size);
        }
        p += 8 + size;
      }
    }
  } catch (const Damage& d) {
    throw damaged(d.what);
  }
}

// The file of `id` when it is open read-only (one open for writing may hold newer headers in HDF5's cache than
// on disk), else an invalid handle.
Handle read_only_file(hid_t id) {
  hid_t file_id = H5Iget_file_id(id);
  if (file_id < 0) {
    H5Eclear2(H5E_DEFAULT);
    return Handle();
  }
  Handle file(file_id, H5Fclose);
  unsigned intent = 0;
  if (H5Fget_intent(file_id, &intent) < 0 || intent != H5F_ACC_RDONLY) return Handle();
  return file;
}

}  // namespace

void check_object_header(const Location& loc) {
  Handle file = read_only_file(loc.id());
  if (!file.valid()) return;
  H5O_info_t info{};
  if (H5Oget_info2(loc.id(), &info, H5O_INFO_BASIC) < 0) throw_h5("cannot read the object header of", loc.path());
  check_header(file.id(), info.addr, name_in_file(loc.id()));
}

void check_object_header(const Location& parent, const std::string& name) {
  Handle file = read_only_file(parent.id());
  if (!file.valid()) return;
  H5O_info_t info{};
  // Finds the header through the group's links without decoding the object's messages.
  if (H5Oget_info_by_name2(parent.id(), name.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0) return;
  const std::string at = name_in_file(parent.id());
  check_header(file.id(), info.addr, at + (at.empty() || at.back() != '/' ? "/" : "") + name);
}

void check_dataset_storage(const Dataset& ds) {
  Handle file = read_only_file(ds.id());
  if (!file.valid()) return;
  Handle dcpl(H5Dget_create_plist(ds.id()), H5Pclose);
  const H5D_layout_t layout = H5Pget_layout(dcpl.id());
  if (layout != H5D_CONTIGUOUS && layout != H5D_COMPACT) return;
  const hsize_t stored = H5Dget_storage_size(ds.id());
  if (stored == 0) return;  // never written: reads give the fill value
  Handle type(H5Dget_type(ds.id()), H5Tclose);
  if (H5Tis_variable_str(type.id()) != 0 || H5Tget_class(type.id()) == H5T_VLEN) return;  // sizes in memory
  const size_t width = H5Tget_size(type.id());
  const hsize_t n = ds.size();
  if (width == 0 || n > stored / width || n * width != stored)
    throw RuntimeError(file_message("cannot read", file_path(file.id()),
                                    "damaged dataset " + name_in_file(ds.id()) + ": its dataspace says " +
                                        std::to_string(n) + " elements of " + std::to_string(width) +
                                        " bytes, its storage holds " + std::to_string(stored) + " bytes"));
}

}  // namespace cairn::h5
