// The timing wrapper behind profile.h: one generated forwarding function per Backend op.
#include "cairn/kernels/profile.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

namespace cairn::kernels {
namespace {

const Backend* g_inner = nullptr;
std::mutex g_mutex;
std::vector<OpTime> g_table;  // indexed by op slot
// The matmuls by (backward, n, c, oc, grad_input).
std::map<std::tuple<bool, long, long, long, bool>, GemmShapeTime> g_gemms;

void record(int slot, const char* name, double seconds) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if ((int)g_table.size() <= slot) g_table.resize(slot + 1);
  g_table[slot].op = name;
  g_table[slot].calls++;
  g_table[slot].seconds += seconds;
}

void record_gemm(bool backward, int n, int c, int oc, bool grad_input, double seconds) {
  std::lock_guard<std::mutex> lock(g_mutex);
  GemmShapeTime& g = g_gemms[{backward, n, c, oc, grad_input}];
  g.op = backward ? "matmul_backward" : "matmul_forward";
  g.n = n;
  g.c = c;
  g.oc = oc;
  g.grad_input = grad_input;
  g.calls++;
  g.seconds += seconds;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
      record(Slot, Name, since(t0));
    } else {
      R r = (g_inner->*Member)(args...);
      g_inner->synchronize();
      record(Slot, Name, since(t0));
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

// The matmuls are also timed by shape (one timing feeds both tables).
void matmul_forward_by_shape(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                             WeightLayout layout) {
  const auto t0 = std::chrono::steady_clock::now();
  g_inner->matmul_forward(out, inp, weight, bias, N, C, OC, layout);
  g_inner->synchronize();
  const double s = since(t0);
  record(kSlot_matmul_forward, k_matmul_forward, s);
  record_gemm(false, N, C, OC, true, s);
}
void matmul_backward_by_shape(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                              const float* weight, int N, int C, int OC, WeightLayout layout) {
  const auto t0 = std::chrono::steady_clock::now();
  g_inner->matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, layout);
  g_inner->synchronize();
  const double s = since(t0);
  record(kSlot_matmul_backward, k_matmul_backward, s);
  record_gemm(true, N, C, OC, dinp != nullptr, s);
}

}  // namespace

const Backend& profiled_backend(const Backend& inner) {
  static Backend wrapped;
  g_inner = &inner;
  wrapped = inner;  // memory hooks and name pass straight through
#define CAIRN_WRAP(op) wrapped.op = &Wrap<&Backend::op, kSlot_##op, k_##op>::call;
  CAIRN_KERNEL_OPS(CAIRN_WRAP)
#undef CAIRN_WRAP
  wrapped.matmul_forward = &matmul_forward_by_shape;
  wrapped.matmul_backward = &matmul_backward_by_shape;
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

std::vector<GemmShapeTime> profile_gemm_shapes() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<GemmShapeTime> out;
  for (const auto& [key, g] : g_gemms) out.push_back(g);
  std::sort(out.begin(), out.end(),
            [](const GemmShapeTime& a, const GemmShapeTime& b) { return a.seconds > b.seconds; });
  return out;
}

void profile_reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_table.clear();
  g_gemms.clear();
}

}  // namespace cairn::kernels
