// [train]: keys of this section (owned by the train work; add keys here).
#include "sections.h"

namespace cairn::schema {
void declare_train(Schema& s) {
  (void)s;
}
}  // namespace cairn::schema
