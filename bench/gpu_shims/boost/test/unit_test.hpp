// Minimal stand-in for Boost.Test used ONLY by bench/kernels_gpu_bench.sh on GPU machines that lack Boost: the
// handful of macros the gpu-labelled tests use, with Boost's meaning (CHECK continues, REQUIRE ends the test case,
// CLOSE is Boost's strong percentage check). Exit status: 0 all passed, 1 any failure.
#pragma once
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace cairn_test_shim {
struct Case {
  const char* name;
  void (*fn)();
};
inline std::vector<Case>& cases() {
  static std::vector<Case> c;
  return c;
}
inline int& failures() {
  static int f = 0;
  return f;
}
struct RequireFailed {};
struct Registrar {
  Registrar(const char* name, void (*fn)()) { cases().push_back({name, fn}); }
};
// BOOST_TEST_CONTEXT's messages, innermost last; printed with every failure inside them.
inline std::vector<std::string>& contexts() {
  static std::vector<std::string> c;
  return c;
}
struct Context {
  explicit Context(std::string what) { contexts().push_back(std::move(what)); }
  ~Context() { contexts().pop_back(); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
};
inline void fail(const char* file, int line, const std::string& what, bool require) {
  ++failures();
  std::printf("%s(%d): error: check %s failed\n", file, line, what.c_str());
  for (const std::string& c : contexts()) std::printf("  context: %s\n", c.c_str());
  if (require) throw RequireFailed{};
}
inline bool close_pct(double a, double b, double pct) {
  const double d = std::fabs(a - b), t = pct / 100.0;
  if (d == 0) return true;
  return d <= t * std::fabs(a) && d <= t * std::fabs(b);
}
}  // namespace cairn_test_shim

#define CAIRN_SHIM_CAT2(a, b) a##b
#define CAIRN_SHIM_CAT(a, b) CAIRN_SHIM_CAT2(a, b)
#define BOOST_AUTO_TEST_CASE(name)                                                        \
  static void name();                                                                     \
  static cairn_test_shim::Registrar CAIRN_SHIM_CAT(name, _registrar)(#name, &name);       \
  static void name()
#define BOOST_TEST_GLOBAL_FIXTURE(F) static F CAIRN_SHIM_CAT(cairn_global_fixture_, __LINE__)
#define CAIRN_SHIM_MSG(msg) ([&] { std::ostringstream os_; os_ << msg; return os_.str(); }())
#define BOOST_TEST(cond, ...)                                                                                  \
  do {                                                                                                         \
    if (!(cond))                                                                                               \
      cairn_test_shim::fail(__FILE__, __LINE__, CAIRN_SHIM_MSG(#cond __VA_OPT__(<< " [" << __VA_ARGS__ << "]")), \
                            false);                                                                            \
  } while (0)
#define BOOST_CHECK_MESSAGE(cond, msg) \
  do { if (!(cond)) cairn_test_shim::fail(__FILE__, __LINE__, CAIRN_SHIM_MSG(msg), false); } while (0)
#define BOOST_REQUIRE_MESSAGE(cond, msg) \
  do { if (!(cond)) cairn_test_shim::fail(__FILE__, __LINE__, CAIRN_SHIM_MSG(msg), true); } while (0)
#define BOOST_REQUIRE(cond) \
  do { if (!(cond)) cairn_test_shim::fail(__FILE__, __LINE__, #cond, true); } while (0)
#define BOOST_CHECK_THROW(expr, exception_type)                                                           \
  do {                                                                                                    \
    bool thrown_ = false;                                                                                 \
    try {                                                                                                 \
      expr;                                                                                               \
    } catch (const exception_type&) {                                                                     \
      thrown_ = true;                                                                                     \
    }                                                                                                     \
    if (!thrown_) cairn_test_shim::fail(__FILE__, __LINE__, #expr " throws " #exception_type, false);     \
  } while (0)
#define BOOST_REQUIRE_EQUAL(a, b) \
  do { if (!((a) == (b))) cairn_test_shim::fail(__FILE__, __LINE__, #a " == " #b, true); } while (0)
#define BOOST_CHECK_CLOSE(a, b, pct)                                                                            \
  do {                                                                                                          \
    const double a_ = (a), b_ = (b);                                                                            \
    if (!cairn_test_shim::close_pct(a_, b_, (pct)))                                                             \
      cairn_test_shim::fail(__FILE__, __LINE__, CAIRN_SHIM_MSG(#a " ~ " #b " (" << a_ << " vs " << b_ << ")"), false); \
  } while (0)
#define BOOST_CHECK_SMALL(x, tol) \
  do { if (!(std::fabs(x) <= (tol))) cairn_test_shim::fail(__FILE__, __LINE__, #x " small", false); } while (0)
#define BOOST_TEST_MESSAGE(msg) (std::cout << msg << "\n")
#define BOOST_TEST_CONTEXT(msg) if (cairn_test_shim::Context cairn_shim_context_{CAIRN_SHIM_MSG(msg)}; true)

int main() {
  int failed_cases = 0;
  for (const auto& c : cairn_test_shim::cases()) {
    const int before = cairn_test_shim::failures();
    try {
      c.fn();
    } catch (const cairn_test_shim::RequireFailed&) {
    } catch (const std::exception& e) {
      ++cairn_test_shim::failures();
      std::printf("%s: exception: %s\n", c.name, e.what());
    }
    const bool ok = cairn_test_shim::failures() == before;
    failed_cases += ok ? 0 : 1;
    std::printf("%-40s %s\n", c.name, ok ? "passed" : "FAILED");
  }
  std::printf("%zu test cases, %d failed\n", cairn_test_shim::cases().size(), failed_cases);
  return failed_cases ? 1 : 0;
}
