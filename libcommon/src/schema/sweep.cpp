// [sweep]: keys of this section (owned by the sweep work; add keys here).
#include "sections.h"

namespace cairn::schema {
void declare_sweep(Schema& s) {
  (void)s;
}
}  // namespace cairn::schema
