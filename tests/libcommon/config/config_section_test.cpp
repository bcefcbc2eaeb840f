// Typed config sections: a struct's key declarations become schema entries, a typed reader and tool flags.
#define BOOST_TEST_MODULE common_config_section
#include <boost/test/unit_test.hpp>

#include <CLI/CLI.hpp>

#include "cairn/config_section.h"
#include "cairn/error.h"
#include "cairn/sections.h"

using namespace cairn;

namespace {

// A section with every kind of field, declared the way the tools' sections are.
struct DemoSection {
  static constexpr const char* kSection = "demo";
  int64_t count = 3;
  int small = -1;
  double rate = 0.5;
  bool on = true;
  std::string mode = "fast";
  std::vector<std::string> names{"a"};
  std::vector<int64_t> sizes;
  std::vector<double> weights{1.0, 2.0};
  std::optional<std::vector<int64_t>> degrees;
  template <class K>
  static void keys(K& k) {
    using S = DemoSection;
    k(&S::count, "count", Range{1, 100}, Flag{"-n,--count"}, "how many");
    k(&S::small, "small", Range{-1, 10}, "a small int");
    k(&S::rate, "rate", Range{0, 1}, Flag{"--rate"}, "a fraction");
    k(&S::on, "on", Flag{"--on"}, "a switch");
    k(&S::mode, "mode", Choices{"fast", "slow"}, "a choice");
    k(&S::names, "names", Flag{"--names"}, "a list");
    k(&S::sizes, "sizes", Range{1, 8}, "ints");
    k(&S::weights, "weights", "floats");
    k(&S::degrees, "degrees", "fixed or restricted");
  }
};

Schema demo_schema() {
  Schema s;
  declare_section<DemoSection>(s);
  return s;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  BOOST_FAIL("expected a UsageError");
  return "";
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_CASE(declaration_yields_types_defaults_ranges_choices_and_flags) {
  const Schema s = demo_schema();
  BOOST_TEST(s.keys().size() == 9u);
  const KeySpec* count = s.find("demo", "count");
  BOOST_REQUIRE(count);
  BOOST_TEST(static_cast<int>(count->type) == static_cast<int>(KeyType::Int));
  BOOST_TEST(count->default_value == json(3));
  BOOST_TEST(*count->min == 1.0);
  BOOST_TEST(*count->max == 100.0);
  BOOST_TEST(count->flag == "-n,--count");
  BOOST_TEST(count->doc == "how many");
  BOOST_TEST(static_cast<int>(s.find("demo", "rate")->type) == static_cast<int>(KeyType::Float));
  BOOST_TEST(static_cast<int>(s.find("demo", "on")->type) == static_cast<int>(KeyType::Bool));
  BOOST_TEST((s.find("demo", "mode")->choices == std::vector<std::string>{"fast", "slow"}));
  BOOST_TEST(static_cast<int>(s.find("demo", "names")->type) == static_cast<int>(KeyType::StringList));
  BOOST_TEST(static_cast<int>(s.find("demo", "sizes")->type) == static_cast<int>(KeyType::IntList));
  BOOST_TEST(static_cast<int>(s.find("demo", "weights")->type) == static_cast<int>(KeyType::FloatList));
  BOOST_TEST(s.find("demo", "weights")->default_value == json::array({1.0, 2.0}));
  const KeySpec* degrees = s.find("demo", "degrees");
  BOOST_TEST(static_cast<int>(degrees->type) == static_cast<int>(KeyType::IntOrIntList));
  BOOST_TEST(degrees->default_value.is_null());
}

BOOST_AUTO_TEST_CASE(reader_returns_defaults_and_every_layer) {
  const Schema s = demo_schema();
  const DemoSection defaults = read_section<DemoSection>(load_config({}, s));
  BOOST_TEST(defaults.count == 3);
  BOOST_TEST(defaults.mode == "fast");
  BOOST_TEST(!defaults.degrees.has_value());
  BOOST_TEST(defaults.sizes.empty());

  ConfigSources src;
  src.use_env = false;
  src.sets = {"demo.count=7", "demo.rate=1", "demo.on=false", "demo.mode=slow", "demo.names=[\"x\", \"y\"]",
              "demo.sizes=[2, 4]", "demo.degrees=8", "demo.small=-1"};
  const DemoSection d = read_section<DemoSection>(load_config(src, s));
  BOOST_TEST(d.count == 7);
  BOOST_TEST(d.rate == 1.0);  // an integer is accepted for a float key
  BOOST_TEST(!d.on);
  BOOST_TEST(d.mode == "slow");
  BOOST_TEST((d.names == std::vector<std::string>{"x", "y"}));
  BOOST_TEST((d.sizes == std::vector<int64_t>{2, 4}));
  BOOST_REQUIRE(d.degrees.has_value());
  BOOST_TEST((*d.degrees == std::vector<int64_t>{8}));  // one value fixes the choice
}

BOOST_AUTO_TEST_CASE(declared_ranges_and_choices_are_enforced) {
  const Schema s = demo_schema();
  ConfigSources src;
  src.use_env = false;
  src.sets = {"demo.sizes=[2, 9]"};
  BOOST_TEST(contains(error_of([&] { load_config(src, s); }), "above the maximum"));
  src.sets = {"demo.mode=fas"};
  BOOST_TEST(contains(error_of([&] { load_config(src, s); }), "did you mean \"fast\""));
}

BOOST_AUTO_TEST_CASE(flags_set_their_keys_typed_and_errors_name_the_flag) {
  const Schema s = demo_schema();
  CLI::App app{"probe"};
  ToolSettings settings;
  add_section_flags(app, "demo", settings, s);
  const char* argv[] = {"probe", "-n", "42", "--rate", "0.25", "--on", "--names", "p,q"};
  app.parse(8, const_cast<char**>(argv));
  BOOST_REQUIRE(settings.size() == 4u);
  Config cfg(s);
  for (const auto& t : settings) cfg.set(t.key, t.value, Origin{Origin::Program, t.flag});
  const DemoSection d = read_section<DemoSection>(cfg);
  BOOST_TEST(d.count == 42);
  BOOST_TEST(d.rate == 0.25);
  BOOST_TEST(d.on);
  BOOST_TEST((d.names == std::vector<std::string>{"p", "q"}));
  BOOST_TEST(cfg.origin("demo.count").describe() == "--count");

  CLI::App bad{"probe"};
  ToolSettings bad_settings;
  add_section_flags(bad, "demo", bad_settings, s);
  const char* argv2[] = {"probe", "--count", "500"};
  bad.parse(3, const_cast<char**>(argv2));
  Config cfg2(s);
  const std::string msg = error_of([&] {
    for (const auto& t : bad_settings) cfg2.set(t.key, t.value, Origin{Origin::Program, t.flag});
  });
  BOOST_TEST(contains(msg, "--count: demo.count: value 500 is above the maximum 100"));
}

BOOST_AUTO_TEST_CASE(the_registry_is_the_typed_sections) {
  // Every declared key of every tool comes from a section struct, so reading a section yields its defaults.
  const Config cfg = load_config({});
  const TrainSection t = read_section<TrainSection>(cfg);
  BOOST_TEST(t.steps == 1000);
  BOOST_TEST(t.schedule == "cosine");
  const PlanSection p = read_section<PlanSection>(cfg);
  BOOST_TEST(!p.tp.has_value());
  BOOST_TEST(p.cp_min_seq == 16384);
  const SweepSection sw = read_section<SweepSection>(cfg);
  BOOST_TEST((sw.collectives == std::vector<std::string>{"allreduce"}));
  BOOST_TEST(registry().is_open_section("report.gates"));
  BOOST_TEST(registry().is_open_section("eval.task"));
}
