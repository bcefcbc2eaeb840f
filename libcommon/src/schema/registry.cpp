// The one registry of every config section of every tool, built from the typed sections (cairn/sections.h).
#include "cairn/sections.h"

namespace cairn {

const Schema& registry() {
  static const Schema schema = [] {
    Schema s;
    declare_section<RunSection>(s);
    declare_section<ModelSection>(s);
    declare_section<ClusterSection>(s);
    declare_section<ParallelSection>(s);
    declare_section<DataSection>(s);
    declare_section<DataMixSection>(s);
    declare_section<TrainSection>(s);
    declare_section<SweepSection>(s);
    declare_section<PlanSection>(s);
    declare_section<EvalSection>(s);
    s.add_open_section(kEvalTaskSection, KeyType::Table, kEvalTaskDoc, eval_task_keys());
    declare_section<ReportSection>(s);
    s.add_open_section(kReportGatesSection, KeyType::Table, kReportGatesDoc, report_gate_rule_kinds());
    return s;
  }();
  return schema;
}

}  // namespace cairn
