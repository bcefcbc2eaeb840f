// [run]: the run directory every stage writes under, and the experiment's name.
#include "sections.h"

namespace cairn::schema {
void declare_run(Schema& s) {
  s.add("run", "dir", KeyType::String, "runs/default", "run directory; stages write <dir>/<stage>/ (--out overrides)");
  s.add("run", "name", KeyType::String, "", "experiment name shown in reports (default: basename of dir)");
}
}  // namespace cairn::schema
