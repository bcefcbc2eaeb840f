// Error types that carry cairn's exit codes (0 ok, 1 runtime, 2 usage/config, 3 gate failed).
#pragma once
#include <stdexcept>
#include <string>

namespace cairn {

enum ExitCode : int { kExitOk = 0, kExitRuntime = 1, kExitUsage = 2, kExitGate = 3 };
// A stop signal ended the work early after what it had was saved (cairn-train: a checkpoint, to be requeued;
// cairn-sweep: the sizes measured so far). EX_TEMPFAIL, as Slurm scripts test it.
constexpr int kExitStopped = 75;

// Any error a tool reports; main() prints "cairn-<tool>: <what()>" and exits with code().
class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Bad command line, config key, value or input the user must fix: exit 2.
struct UsageError : Error {
  explicit UsageError(const std::string& m) : Error(kExitUsage, m) {}
};
// Something failed while running (I/O, MPI, a numeric blow-up): exit 1.
struct RuntimeError : Error {
  explicit RuntimeError(const std::string& m) : Error(kExitRuntime, m) {}
};
// A check the user asked for failed (wrong results, regression, bandwidth floor): exit 3.
struct GateFailure : Error {
  explicit GateFailure(const std::string& m) : Error(kExitGate, m) {}
};

// `message "path": reason` in htslib style, e.g. file_message("cannot open", p, strerror(errno)).
std::string file_message(const std::string& message, const std::string& path, const std::string& reason);
// file_message() with the reason taken from errno.
std::string errno_message(const std::string& message, const std::string& path);

}  // namespace cairn
