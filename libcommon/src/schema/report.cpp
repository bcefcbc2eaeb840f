// [report] and [report.gates]: cairn-report's inputs and regression gates.
#include "sections.h"

namespace cairn::schema {
void declare_report(Schema& s) {
  s.add_open_section("report.gates", KeyType::Table,
                     "regression gates: metric = { max_increase = x | max_drop_pct = p | max = m | min = m }");
}
}  // namespace cairn::schema
