// The one registry of every config section of every tool.
#include "sections.h"

namespace cairn {

const Schema& registry() {
  static const Schema schema = [] {
    Schema s;
    schema::declare_run(s);
    schema::declare_model(s);
    schema::declare_cluster(s);
    schema::declare_parallel(s);
    schema::declare_data(s);
    schema::declare_train(s);
    schema::declare_sweep(s);
    schema::declare_plan(s);
    schema::declare_eval(s);
    schema::declare_report(s);
    return s;
  }();
  return schema;
}

}  // namespace cairn
