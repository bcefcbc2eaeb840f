// An allocator and an array for large, short-lived data (cairn-plan's search rows): advised for transparent huge pages.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>
#include <utility>

namespace cairn {

// First touching memory costs a page fault per page; on a paravirtualised VM (CI's) each 4 KiB fault costs about
// 18 us, so 330 MB of rows took 1.5 s to touch and 0.03 s with 2 MiB pages. Arrays of 2 MiB or more are 2 MiB-aligned
// and advised MADV_HUGEPAGE (a hint: where transparent huge pages are off they are ordinary pages); smaller ones come
// from operator new.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHugePage = size_t(2) << 20;

  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) return static_cast<T*>(::operator new(bytes));
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = nullptr;
    if (posix_memalign(&p, kHugePage, rounded) != 0) throw std::bad_alloc();
    madvise(p, rounded, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n * sizeof(T) < kHugePage) ::operator delete(p);
    else std::free(p);
  }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
};

// A fixed-size array in huge pages whose elements are constructed on every core (OpenMP, where the includer is built
// with it): a std::vector's resize constructs them on one, and the kernel's zeroing of each fresh 2 MiB page (half a
// second for cairn-plan's 300 MB of rows) then ran on that one too. Move-only.
template <class T>
class HugePageArray {
 public:
  HugePageArray() = default;
  explicit HugePageArray(size_t n) : data_(n ? HugePageAllocator<T>().allocate(n) : nullptr), size_(n) {
    const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t i = 0; i < count; ++i) ::new (static_cast<void*>(data_ + i)) T();
  }
  ~HugePageArray() { reset(); }
  HugePageArray(HugePageArray&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  HugePageArray& operator=(HugePageArray&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  HugePageArray(const HugePageArray&) = delete;
  HugePageArray& operator=(const HugePageArray&) = delete;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  T& front() { return data_[0]; }
  const T& front() const { return data_[0]; }

 private:
  void reset() {
    if (!data_) return;
    for (size_t i = 0; i < size_; ++i) data_[i].~T();
    HugePageAllocator<T>().deallocate(data_, size_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace cairn
