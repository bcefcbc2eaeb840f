// Declarations of each config section's keys; each section lives in its own file in this folder.
#pragma once
#include "cairn/config.h"

namespace cairn::schema {
void declare_run(Schema& s);
void declare_model(Schema& s);
void declare_cluster(Schema& s);
void declare_parallel(Schema& s);
void declare_data(Schema& s);
void declare_train(Schema& s);
void declare_sweep(Schema& s);
void declare_plan(Schema& s);
void declare_eval(Schema& s);
void declare_report(Schema& s);
}  // namespace cairn::schema
