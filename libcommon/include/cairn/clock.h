// Clocks every tool reads: monotonic seconds for phase and step times, Unix seconds for wall_time fields.
#pragma once
#include <chrono>

namespace cairn {

// Seconds on the monotonic clock (durations: never jumps with NTP or the wall clock).
inline double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds since the Unix epoch (metrics' wall_time).
inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace cairn
