// Shared-memory race checker for the host emulation of the bf16 flash-attention block code: the host branches of its
// shared-memory primitives (kernels/cuda/flash_attention_bf16_tiles.h: lds32, sts32, lds16, ldsf, stsf) report every
// access here, and the host executor (flash_bf16_host.h) turns the check on per block. Host code only.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace cairn::kernels::flash_bf16 {

// The checker: phases run one after another on the host, so a missing barrier cannot change the emulated result;
// instead every shared-memory access of the block code is checked against the others since the last barrier: a read
// of a location another thread wrote (RAW), a write of a location another thread read (WAR) or wrote (WAW) in the
// same barrier interval throws.
// Granularity 16 bits; pointers outside the registered block are ignored.
struct SmemRaceCheck {
  const uint16_t* base = nullptr;
  size_t halves = 0;
  int tid = -1, epoch = 0;
  std::vector<int> w_tid, w_epoch, r_tid, r_epoch;  // last writer; reader (-2: several) of the current epoch
  void reset(const uint16_t* b, size_t n) {
    base = b;
    halves = n;
    epoch = 0;
    w_tid.assign(n, -1);
    w_epoch.assign(n, -1);
    r_tid.assign(n, -1);
    r_epoch.assign(n, -1);
  }
  void access(const void* p, size_t bytes, bool write) {
    const uint16_t* h = static_cast<const uint16_t*>(p);
    if (!base || h < base || h >= base + halves) return;
    for (size_t i = (size_t)(h - base), e = i + bytes / 2; i < e && i < halves; i++) {
      const bool other_wrote = w_epoch[i] == epoch && w_tid[i] != tid;
      if (write) {
        if (other_wrote || (r_epoch[i] == epoch && r_tid[i] != tid))
          throw std::logic_error("flash bf16: shared-memory race (thread " + std::to_string(tid) + " writes element " +
                                 std::to_string(i) + " another thread accessed since the last barrier)");
        w_tid[i] = tid;
        w_epoch[i] = epoch;
      } else {
        if (other_wrote)
          throw std::logic_error("flash bf16: shared-memory race (thread " + std::to_string(tid) + " reads element " +
                                 std::to_string(i) + " thread " + std::to_string(w_tid[i]) +
                                 " wrote since the last barrier)");
        if (r_epoch[i] != epoch) {
          r_epoch[i] = epoch;
          r_tid[i] = tid;
        } else if (r_tid[i] != tid) {
          r_tid[i] = -2;
        }
      }
    }
  }
};
inline SmemRaceCheck*& race_check() {
  static thread_local SmemRaceCheck* check = nullptr;
  return check;
}
inline void race_access(const void* p, size_t bytes, bool write) {
  if (SmemRaceCheck* c = race_check()) c->access(p, bytes, write);
}

}  // namespace cairn::kernels::flash_bf16
