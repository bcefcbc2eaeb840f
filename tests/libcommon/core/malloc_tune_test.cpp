// keep_freed_memory_mapped (cairn/malloc_tune.h): after it, a message-sized block is served from the heap, not a
// fresh mapping, and freeing it keeps it for the next request (what Open MPI's per-call temporaries need).
#define BOOST_TEST_MODULE common_malloc_tune
#include <malloc.h>

#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <cstring>

#include "cairn/malloc_tune.h"

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kGlibcMalloc = false;
#else
constexpr bool kGlibcMalloc = true;
#endif
boost::test_tools::assertion_result glibc_malloc(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result r(kGlibcMalloc);
  r.message() << "a sanitizer replaces glibc's malloc, whose settings this checks";
  return r;
}

constexpr size_t kBlock = size_t(64) << 20;  // above glibc's largest dynamic mmap threshold (32 MiB)

// Allocates and touches one block, and returns the bytes glibc holds in mmap'd blocks while it lives.
size_t mapped_bytes_while_holding_a_block() {
  void* volatile p = std::malloc(kBlock);
  BOOST_TEST_REQUIRE(p != nullptr);
  std::memset(p, 1, kBlock);
  const size_t mapped = mallinfo2().hblkhd;
  std::free(p);
  return mapped;
}

}  // namespace

BOOST_AUTO_TEST_CASE(large_blocks_come_from_the_heap_and_stay_after_free,
                     *boost::unit_test::precondition(glibc_malloc)) {
  BOOST_TEST(mapped_bytes_while_holding_a_block() >= kBlock);  // the default: a mapping of its own
  BOOST_TEST(cairn::keep_freed_memory_mapped());
  BOOST_TEST(mapped_bytes_while_holding_a_block() < kBlock);
  BOOST_TEST(mallinfo2().fordblks >= kBlock);  // freed, kept in the heap for the next request
  const size_t heap = mallinfo2().arena;
  BOOST_TEST(mapped_bytes_while_holding_a_block() < kBlock);
  BOOST_TEST(mallinfo2().arena == heap);  // the second block reused the first one's memory
}
