// [data]: keys of this section (owned by the data work; add keys here).
#include "sections.h"

namespace cairn::schema {
void declare_data(Schema& s) {
  (void)s;
}
}  // namespace cairn::schema
