// Error message helpers (htslib-style `message "path": reason`).
#include "cairn/error.h"

#include <cerrno>
#include <cstring>

namespace cairn {

std::string file_message(const std::string& message, const std::string& path, const std::string& reason) {
  return message + " \"" + path + "\": " + reason;
}

std::string errno_message(const std::string& message, const std::string& path) {
  return file_message(message, path, std::strerror(errno));
}

}  // namespace cairn
