// Rank-aware logging to stderr and a progress line for long loops.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace cairn {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Quiet = 4 };

// Parses "debug|info|warn|error|quiet"; throws UsageError otherwise.
LogLevel parse_log_level(const std::string& name);

// Global logger settings. By default only rank 0 logs (other ranks log warnings and errors);
// with all_ranks every line carries a "[r3/8 host]" prefix.
struct LogSettings {
  LogLevel level = LogLevel::Info;
  std::string tool = "cairn";
  int rank = 0;
  int size = 1;
  std::string host;
  bool all_ranks = false;
};
LogSettings& log_settings();

void log_message(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void vlog_message(LogLevel level, const char* fmt, va_list args);
#define CAIRN_LOG_DEBUG(...) ::cairn::log_message(::cairn::LogLevel::Debug, __VA_ARGS__)
#define CAIRN_LOG_INFO(...) ::cairn::log_message(::cairn::LogLevel::Info, __VA_ARGS__)
#define CAIRN_LOG_WARN(...) ::cairn::log_message(::cairn::LogLevel::Warn, __VA_ARGS__)
#define CAIRN_LOG_ERROR(...) ::cairn::log_message(::cairn::LogLevel::Error, __VA_ARGS__)

// printf into a std::string.
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Progress for a loop of known length: on a TTY it redraws one line (rate, ETA) at most every
// 0.2 s; otherwise it prints a plain line every `plain_interval_s` seconds so batch logs stay short.
// The environment variable CAIRN_PROGRESS_INTERVAL (seconds, >= 0) replaces every line's plain interval: 0 prints
// each update, so a test sees a long pass's lines without waiting on a timer.
class Progress {
 public:
  Progress(std::string label, uint64_t total, std::string unit = "items", double plain_interval_s = 30.0);
  ~Progress();
  void update(uint64_t done, const std::string& extra = "");
  // Counts `n` more done, from any thread (a check of shards on several threads): the line is printed as update()
  // prints it, by a thread that finds it due. A Progress is advanced either by update() or by add(), not both.
  void add(uint64_t n);
  void finish(const std::string& extra = "");
  // The loop ended early (a stop signal): the last line shows `done`, not the total.
  void finish_at(uint64_t done, const std::string& extra = "");
  // Items of unequal cost (a sweep's sizes: the last take most of the time): `work[i]` is item i's expected cost in
  // any unit; the ETA then follows the work done, not the item count (it said 3 s at 23 of 25 sizes, then 4 s, and
  // the sweep took 2 more minutes).
  void set_work(const std::vector<double>& work);
  // The seconds left after `done` items in `elapsed` seconds (-1 when unknown): by the work when set_work gave it.
  double eta_seconds(uint64_t done, double elapsed) const;

 private:
  void print(uint64_t done, const std::string& extra, bool final);
  std::string label_, unit_;
  uint64_t total_;
  double plain_interval_s_;
  bool tty_, enabled_, finished_ = false;
  std::vector<double> work_done_;  // set_work: the work of items [0, i), for i = 0..total
  std::chrono::steady_clock::time_point start_, last_;
  std::atomic<uint64_t> added_{0};  // add()'s count
  std::mutex add_mutex_;            // held by the thread that prints add()'s line
};

}  // namespace cairn
