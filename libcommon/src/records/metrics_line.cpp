// metrics.jsonl's record: StepTimes and MetricsLine to and from JSON (the fast scanner is metrics_scan.cpp).
#include <cfloat>
#include <cmath>

#include "cairn/records.h"
#include "fields.h"

using nlohmann::json;

namespace cairn::records {

json StepTimes::to_json() const {
  json j = json::object();
#define CAIRN_RECORDS_PUT_TIME(name) j[#name] = detail::number_or_null(name);
  CAIRN_STEP_TIME_FIELDS(CAIRN_RECORDS_PUT_TIME)
#undef CAIRN_RECORDS_PUT_TIME
  return j;
}

StepTimes StepTimes::from_json(const JsonFields& f) {
  StepTimes t;
  const double nan = std::nan("");
#define CAIRN_RECORDS_GET_TIME(name) t.name = f.number_or(#name, nan, -DBL_MAX, DBL_MAX);
  CAIRN_STEP_TIME_FIELDS(CAIRN_RECORDS_GET_TIME)
#undef CAIRN_RECORDS_GET_TIME
  return t;
}

json MetricsLine::to_json() const {
  json j = json::object();
  if (!kind.empty()) j["kind"] = kind;
#define CAIRN_RECORDS_PUT_FIELD(type, name) detail::put(j, #name, name);
  CAIRN_METRICS_LINE_FIELDS(CAIRN_RECORDS_PUT_FIELD)
#undef CAIRN_RECORDS_PUT_FIELD
  if (time_s) j["time_s"] = time_s->to_json();
  if (!provenance.is_null()) j["provenance"] = provenance;
  return j;
}

MetricsLine MetricsLine::from_json(const JsonFields& f) {
  MetricsLine m;
  m.kind = f.str_or("kind", "");
#define CAIRN_RECORDS_GET_FIELD(type, name) detail::get(f, #name, m.name);
  CAIRN_METRICS_LINE_FIELDS(CAIRN_RECORDS_GET_FIELD)
#undef CAIRN_RECORDS_GET_FIELD
  if (f.has("time_s")) m.time_s = StepTimes::from_json(f.object("time_s"));
  if (f.has("provenance")) m.provenance = f.object("provenance").raw();
  return m;
}

MetricsLine MetricsLine::parse(std::string_view line, const std::string& where) {
  const json j = parse_json_text(std::string(line), where, "metrics line");
  return from_json(JsonFields(j, where, "metrics line"));
}

}  // namespace cairn::records
