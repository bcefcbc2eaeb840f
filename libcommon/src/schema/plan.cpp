// [plan]: keys of this section (owned by the plan work; add keys here).
#include "sections.h"

namespace cairn::schema {
void declare_plan(Schema& s) {
  (void)s;
}
}  // namespace cairn::schema
