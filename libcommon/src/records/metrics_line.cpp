// metrics.jsonl's record: StepTimes and MetricsLine to and from JSON (the fast scanner is metrics_scan.cpp).
#include <cfloat>
#include <climits>
#include <cmath>
#include <string>

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

json StageTimes::to_json() const { return json{{"stage", stage}, {"rank", rank}, {"time_s", time.to_json()}}; }

StageTimes StageTimes::from_json(const JsonFields& f) {
  StageTimes t;
  t.stage = f.i64("stage", 0, INT32_MAX);
  t.rank = f.i64("rank", 0, INT32_MAX);
  t.time = StepTimes::from_json(f.object("time_s"));
  return t;
}

double compute_seconds(const StepTimes& t) {
  return phase_seconds(t.forward) + phase_seconds(t.backward) - phase_seconds(t.tp_comm) - phase_seconds(t.cp_comm) -
         phase_seconds(t.zero_comm);
}

double stage_busy_seconds(const StepTimes& t) {
  return phase_seconds(t.forward) + phase_seconds(t.backward) - phase_seconds(t.zero_comm);
}

int critical_stage(const std::vector<StageTimes>& stages) {
  int best = -1;
  for (size_t i = 0; i < stages.size(); ++i)
    if (best < 0 || compute_seconds(stages[i].time) > compute_seconds(stages[size_t(best)].time)) best = int(i);
  return best;
}

json MetricsLine::to_json() const {
  json j = json::object();
  if (!kind.empty()) j["kind"] = kind;
#define CAIRN_RECORDS_PUT_FIELD(type, name) detail::put(j, #name, name);
  CAIRN_METRICS_LINE_FIELDS(CAIRN_RECORDS_PUT_FIELD)
#undef CAIRN_RECORDS_PUT_FIELD
  if (time_s) j["time_s"] = time_s->to_json();
  if (!stages.empty()) {
    json a = json::array();
    for (const StageTimes& st : stages) a.push_back(st.to_json());
    j["stages"] = std::move(a);
  }
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
  if (f.has("stages")) {
    const json& a = f.array("stages");
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string key = "stages[" + std::to_string(i) + "]";
      if (!a[i].is_object()) f.fail_value(key, a[i], "an object");
      m.stages.push_back(StageTimes::from_json(f.nested(a[i], key)));
    }
  }
  if (f.has("provenance")) m.provenance = f.object("provenance").raw();
  return m;
}

MetricsLine MetricsLine::parse(std::string_view line, const std::string& where) {
  const json j = parse_json_text(std::string(line), where, "metrics line");
  return from_json(JsonFields(j, where, "metrics line"));
}

}  // namespace cairn::records
