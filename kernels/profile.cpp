// The timing wrapper behind profile.h: one generated forwarding function per Backend op.
#include "cairn/kernels/profile.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <type_traits>

namespace cairn::kernels {
namespace {

const Backend* g_inner = nullptr;
std::mutex g_mutex;
std::vector<OpTime> g_table;  // indexed by op slot

void record(int slot, const char* name, double seconds) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if ((int)g_table.size() <= slot) g_table.resize(slot + 1);
  g_table[slot].op = name;
  g_table[slot].calls++;
  g_table[slot].seconds += seconds;
}

// Wrap<&Backend::op, slot, name>::call has the op's exact signature: it times the inner backend's op.
template <auto Member, int Slot, const char* Name>
struct Wrap;
template <typename R, typename... A, R (*Backend::*Member)(A...), int Slot, const char* Name>
struct Wrap<Member, Slot, Name> {
  static R call(A... args) {
    const auto t0 = std::chrono::steady_clock::now();
    if constexpr (std::is_void_v<R>) {
      (g_inner->*Member)(args...);
      g_inner->synchronize();
      record(Slot, Name, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    } else {
      R r = (g_inner->*Member)(args...);
      g_inner->synchronize();
      record(Slot, Name, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      return r;
    }
  }
};

// One slot and one name per op, from the single op list in backend.h.
enum Slot : int {
#define CAIRN_OP_SLOT(op) kSlot_##op,
  CAIRN_KERNEL_OPS(CAIRN_OP_SLOT)
#undef CAIRN_OP_SLOT
};
#define CAIRN_OP_NAME(op) constexpr char k_##op[] = #op;
CAIRN_KERNEL_OPS(CAIRN_OP_NAME)
#undef CAIRN_OP_NAME

}  // namespace

const Backend& profiled_backend(const Backend& inner) {
  static Backend wrapped;
  g_inner = &inner;
  wrapped = inner;  // memory hooks and name pass straight through
#define CAIRN_WRAP(op) wrapped.op = &Wrap<&Backend::op, kSlot_##op, k_##op>::call;
  CAIRN_KERNEL_OPS(CAIRN_WRAP)
#undef CAIRN_WRAP
  return wrapped;
}

std::vector<OpTime> profile_report() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<OpTime> out;
  for (const auto& t : g_table)
    if (t.calls) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return out;
}

void profile_reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_table.clear();
}

}  // namespace cairn::kernels
