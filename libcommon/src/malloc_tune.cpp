// keep_freed_memory_mapped (malloc_tune.h): glibc's mallopt, set once per process.
#include "cairn/malloc_tune.h"

#include <malloc.h>

namespace cairn {

bool keep_freed_memory_mapped() {
  // M_MMAP_MAX 0: no mmap'd chunks at all (a threshold cannot be raised past 32 MiB, and GPT-2's embedding unit alone
  // is 154 MB); M_TRIM_THRESHOLD -1: never trim (a fixed 1 GiB threshold still re-faulted 1 GiB temporaries).
  const bool no_mmap = mallopt(M_MMAP_MAX, 0) == 1;
  const bool no_trim = mallopt(M_TRIM_THRESHOLD, -1) == 1;
  return no_mmap && no_trim;
}

}  // namespace cairn
