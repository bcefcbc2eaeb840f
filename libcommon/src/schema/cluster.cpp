// [cluster]: keys of this section (owned by the cluster work; add keys here).
#include "sections.h"

namespace cairn::schema {
void declare_cluster(Schema& s) {
  (void)s;
}
}  // namespace cairn::schema
