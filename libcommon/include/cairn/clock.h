// Clocks every tool reads: monotonic seconds for phase and step times, Unix seconds for wall_time fields.
#pragma once
#include <chrono>
#include <functional>
#include <utility>

namespace cairn {

// Seconds on the monotonic clock (durations: never jumps with NTP or the wall clock).
inline double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds since the Unix epoch (metrics' wall_time).
inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Runs f and reports its duration in seconds to on_seconds (when set): the communication timers of cairn-train's
// MPI collectives (TP, CP, ZeRO units) share it.
template <typename F>
void timed_call(const std::function<void(double)>& on_seconds, F&& f) {
  if (!on_seconds) {
    std::forward<F>(f)();
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::forward<F>(f)();
  on_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace cairn
