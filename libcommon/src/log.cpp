// Rank-aware stderr logging and progress lines.
#include "cairn/log.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "cairn/error.h"

namespace cairn {

namespace {
std::mutex g_log_mutex;
const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::Debug: return "debug";
    case LogLevel::Info: return "info";
    case LogLevel::Warn: return "warning";
    case LogLevel::Error: return "error";
    default: return "";
  }
}
}  // namespace

LogLevel parse_log_level(const std::string& name) {
  if (name == "debug") return LogLevel::Debug;
  if (name == "info") return LogLevel::Info;
  if (name == "warn" || name == "warning") return LogLevel::Warn;
  if (name == "error") return LogLevel::Error;
  if (name == "quiet") return LogLevel::Quiet;
  throw UsageError("unknown log level '" + name + "' (expected debug, info, warn, error or quiet)");
}

LogSettings& log_settings() {
  static LogSettings s;
  return s;
}

void vlog_message(LogLevel level, const char* fmt, va_list args) {
  const LogSettings& s = log_settings();
  if (level < s.level) return;
  // Non-zero ranks stay quiet below warnings unless every rank logs: one log per job, not per rank.
  if (!s.all_ranks && s.rank != 0 && level < LogLevel::Warn) return;
  char body[4096];
  vsnprintf(body, sizeof body, fmt, args);
  std::string prefix = s.tool + ": ";
  if (s.size > 1 && (s.all_ranks || s.rank != 0)) {
    prefix = strprintf("[r%d/%d %s] ", s.rank, s.size, s.host.c_str()) + prefix;
  }
  if (level == LogLevel::Warn || level == LogLevel::Error || level == LogLevel::Debug) {
    prefix += std::string(level_name(level)) + ": ";
  }
  std::lock_guard<std::mutex> lock(g_log_mutex);
  std::fprintf(stderr, "%s%s\n", prefix.c_str(), body);
  std::fflush(stderr);
}

void log_message(LogLevel level, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vlog_message(level, fmt, args);
  va_end(args);
}

std::string strprintf(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  int n = vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? n : 0, '\0');
  if (n > 0) vsnprintf(out.data(), out.size() + 1, fmt, args);
  va_end(args);
  return out;
}

namespace {
std::string format_duration(double s) {
  if (s < 0 || s > 1e8) return "?";
  const int t = static_cast<int>(std::lround(s));
  if (t >= 3600) return strprintf("%dh%02dm", t / 3600, (t / 60) % 60);
  if (t >= 60) return strprintf("%dm%02ds", t / 60, t % 60);
  return strprintf("%ds", t);
}

// CAIRN_PROGRESS_INTERVAL's seconds, or `own` when it is unset or not a number >= 0.
double plain_interval_from_env(double own) {
  const char* text = std::getenv("CAIRN_PROGRESS_INTERVAL");
  if (!text || !*text) return own;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  return *end == '\0' && seconds >= 0 ? seconds : own;
}
}  // namespace

Progress::Progress(std::string label, uint64_t total, std::string unit, double plain_interval_s)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      plain_interval_s_(plain_interval_from_env(plain_interval_s)) {
  const LogSettings& s = log_settings();
  enabled_ = s.level <= LogLevel::Info && (s.rank == 0 || s.all_ranks);
  tty_ = isatty(STDERR_FILENO);
  start_ = last_ = std::chrono::steady_clock::now();
}

Progress::~Progress() {
  if (!finished_ && tty_ && enabled_) {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    std::fprintf(stderr, "\n");
  }
}

void Progress::update(uint64_t done, const std::string& extra) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_).count();
  if (since < (tty_ ? 0.2 : plain_interval_s_)) return;
  last_ = now;
  print(done, extra, false);
}

void Progress::add(uint64_t n) {
  if (!enabled_) return;
  added_.fetch_add(n, std::memory_order_relaxed);
  // A thread that finds another printing goes on with its work: the next add() shows its count. The count is read
  // under the lock, so the lines never go backwards.
  std::unique_lock<std::mutex> lock(add_mutex_, std::try_to_lock);
  if (lock.owns_lock()) update(added_.load(std::memory_order_relaxed));
}

void Progress::set_work(const std::vector<double>& work) {
  work_done_.assign(1, 0.0);
  for (double w : work) work_done_.push_back(work_done_.back() + std::max(w, 0.0));
}

double Progress::eta_seconds(uint64_t done, double elapsed) const {
  if (work_done_.size() == total_ + 1 && done <= total_ && work_done_[done] > 0)
    return elapsed * (work_done_.back() - work_done_[done]) / work_done_[done];
  const double rate = elapsed > 0 ? done / elapsed : 0;
  return rate > 0 && total_ >= done ? (total_ - done) / rate : -1;
}

void Progress::finish(const std::string& extra) { finish_at(total_, extra); }

void Progress::finish_at(uint64_t done, const std::string& extra) {
  if (finished_) return;
  finished_ = true;
  if (enabled_) print(done, extra, true);
}

void Progress::print(uint64_t done, const std::string& extra, bool final) {
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = elapsed > 0 ? done / elapsed : 0;
  double eta = eta_seconds(done, elapsed);
  std::string line = strprintf("%s: %s %llu/%llu %s (%.1f%%) %.3g %s/s", log_settings().tool.c_str(), label_.c_str(),
                               static_cast<unsigned long long>(done), static_cast<unsigned long long>(total_),
                               unit_.c_str(), total_ ? 100.0 * done / total_ : 100.0, rate, unit_.c_str());
  line += final ? " in " + format_duration(elapsed) : " ETA " + format_duration(eta);
  if (!extra.empty()) line += " " + extra;
  std::lock_guard<std::mutex> lock(g_log_mutex);
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

}  // namespace cairn
