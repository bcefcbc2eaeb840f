// [eval]: keys of this section (owned by the eval work; add keys here).
#include "sections.h"

namespace cairn::schema {
void declare_eval(Schema& s) {
  (void)s;
}
}  // namespace cairn::schema
