// An allocator for large, short-lived arrays (cairn-plan's search rows): advised for transparent huge pages.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>

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

}  // namespace cairn
