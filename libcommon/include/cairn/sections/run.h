// [run]: the run directory every stage writes under, and the experiment's name.
#pragma once
#include <string>

#include "cairn/config_section.h"

namespace cairn {

struct RunSection {
  static constexpr const char* kSection = "run";
  std::string dir = "runs/default";
  std::string name;
  template <class K>
  static void keys(K& k) {
    k(&RunSection::dir, "dir", "run directory; stages write <dir>/<stage>/ (--out overrides)");
    k(&RunSection::name, "name", "experiment name shown in reports (default: basename of dir)");
  }
};

}  // namespace cairn
