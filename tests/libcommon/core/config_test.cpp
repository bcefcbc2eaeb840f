// Config layering (defaults < file < env < --set), includes, cycles and every kind of config error.
#define BOOST_TEST_MODULE common_config
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "cairn/config.h"
#include "cairn/error.h"

using namespace cairn;

namespace {
std::string data(const std::string& name) {
  return std::string(std::getenv("CAIRN_SOURCE_DIR")) + "/tests/libcommon/core/data/" + name;
}

// Returns the UsageError message of loading `sources`, or fails the test if it loads.
std::string load_error(const ConfigSources& sources) {
  try {
    load_config(sources);
  } catch (const UsageError& e) {
    return e.what();
  }
  BOOST_FAIL("expected a UsageError");
  return "";
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

BOOST_AUTO_TEST_CASE(defaults_apply_when_nothing_is_set) {
  Config cfg = load_config({});
  BOOST_TEST(cfg.get_int("model.layers") == 12);
  BOOST_TEST(cfg.get_string("model.architecture") == "gpt");
  BOOST_TEST(cfg.origin("model.layers").kind == Origin::Default);
}

BOOST_AUTO_TEST_CASE(include_then_file_then_env_then_set) {
  ConfigSources src;
  src.files = {data("experiment.toml")};
  Config file_only = load_config(src);
  BOOST_TEST(file_only.get_int("model.heads") == 4);   // from the include
  BOOST_TEST(file_only.get_int("model.layers") == 6);  // including file overrides the include
  BOOST_TEST(file_only.get_int("parallel.tp") == 2);
  BOOST_TEST(contains(file_only.origin("model.layers").where, "experiment.toml:5:"));
  BOOST_TEST(contains(file_only.origin("model.heads").where, "base.toml:4:"));
  BOOST_TEST(file_only.section("report.gates")["val_loss"]["max_increase"].get<double>() == 0.02);

  setenv("CAIRN_MODEL_LAYERS", "8", 1);
  setenv("CAIRN_MODEL_HIDDEN", "96", 1);
  src.sets = {"model.layers=10"};
  Config cfg = load_config(src);
  unsetenv("CAIRN_MODEL_LAYERS");
  unsetenv("CAIRN_MODEL_HIDDEN");
  BOOST_TEST(cfg.get_int("model.layers") == 10);  // --set beats env
  BOOST_TEST(cfg.origin("model.layers").kind == Origin::Set);
  BOOST_TEST(cfg.get_int("model.hidden") == 96);  // env beats file
  BOOST_TEST(cfg.origin("model.hidden").describe() == "env CAIRN_MODEL_HIDDEN");
  BOOST_TEST(cfg.get_int("model.heads") == 4);
  BOOST_TEST(cfg.files_read().size() == 2u);
}

BOOST_AUTO_TEST_CASE(env_for_nested_and_string_values) {
  setenv("CAIRN_RUN_DIR", "runs/x y", 1);
  setenv("CAIRN_PARALLEL_RECOMPUTE", "full", 1);
  Config cfg = load_config({});
  unsetenv("CAIRN_RUN_DIR");
  unsetenv("CAIRN_PARALLEL_RECOMPUTE");
  BOOST_TEST(cfg.get_string("run.dir") == "runs/x y");
  BOOST_TEST(cfg.get_string("parallel.recompute") == "full");
}

BOOST_AUTO_TEST_CASE(env_unknown_key_in_known_section_is_an_error) {
  setenv("CAIRN_MODEL_LAYRES", "3", 1);
  std::string msg = load_error({});
  unsetenv("CAIRN_MODEL_LAYRES");
  BOOST_TEST(contains(msg, "CAIRN_MODEL_LAYRES"));
  BOOST_TEST(contains(msg, "CAIRN_MODEL_LAYERS"));
}

BOOST_AUTO_TEST_CASE(env_section_in_any_case) {
  // A lowercase section was dropped without a word; it binds as the uppercase one does, key case too.
  setenv("CAIRN_model_layers", "7", 1);
  Config cfg = load_config({});
  unsetenv("CAIRN_model_layers");
  BOOST_TEST(cfg.get_int("model.layers") == 7);
  setenv("CAIRN_Model_Layres", "7", 1);
  std::string msg = load_error({});
  unsetenv("CAIRN_Model_Layres");
  BOOST_TEST(contains(msg, "CAIRN_Model_Layres"));
  BOOST_TEST(contains(msg, "CAIRN_MODEL_LAYERS"));
}

BOOST_AUTO_TEST_CASE(suggestions_ignore_case) {
  BOOST_TEST(edit_distance("GLOBAL_BATCH", "global_batch") == 0u);
  BOOST_TEST(contains(load_error({{}, {"train.GLOBAL_BATCH=8"}}), "did you mean 'train.global_batch'"));
  BOOST_TEST(contains(load_error({{}, {"MODEL.layers=2"}}), "did you mean [model]"));
}

BOOST_AUTO_TEST_CASE(env_not_naming_a_section_is_ignored) {
  setenv("CAIRN_NOT_A_SECTION_X", "1", 1);
  BOOST_CHECK_NO_THROW(load_config({}));
  unsetenv("CAIRN_NOT_A_SECTION_X");
}

BOOST_AUTO_TEST_CASE(unknown_key_names_file_line_and_suggests) {
  std::string msg = load_error({{data("typo.toml")}, {}});
  BOOST_TEST(contains(msg, "typo.toml:3:1"));
  BOOST_TEST(contains(msg, "unknown key 'hiden' in [model]"));
  BOOST_TEST(contains(msg, "did you mean 'model.hidden'"));
}

BOOST_AUTO_TEST_CASE(unknown_section_suggests) {
  std::string msg = load_error({{data("bad_section.toml")}, {}});
  BOOST_TEST(contains(msg, "bad_section.toml:1:"));
  BOOST_TEST(contains(msg, "unknown section [modle]"));
  BOOST_TEST(contains(msg, "did you mean [model]"));
}

BOOST_AUTO_TEST_CASE(wrong_type_says_what_was_expected) {
  std::string msg = load_error({{data("wrong_type.toml")}, {}});
  BOOST_TEST(contains(msg, "wrong_type.toml:2:1"));
  BOOST_TEST(contains(msg, "model.layers"));
  BOOST_TEST(contains(msg, "expected an integer, got string \"two\""));
}

BOOST_AUTO_TEST_CASE(out_of_range_names_the_limit) {
  std::string msg = load_error({{data("out_of_range.toml")}, {}});
  BOOST_TEST(contains(msg, "out_of_range.toml:3:1"));
  BOOST_TEST(contains(msg, "below the minimum 1"));
}

BOOST_AUTO_TEST_CASE(bad_choice_lists_choices_and_suggests) {
  std::string msg = load_error({{data("bad_choice.toml")}, {}});
  BOOST_TEST(contains(msg, "\"lama\" is not one of gpt, llama"));
  BOOST_TEST(contains(msg, "did you mean \"llama\""));
}

BOOST_AUTO_TEST_CASE(syntax_error_has_position) {
  std::string msg = load_error({{data("bad_syntax.toml")}, {}});
  BOOST_TEST(contains(msg, "bad_syntax.toml:2:"));
  BOOST_TEST(contains(msg, "invalid TOML"));
}

BOOST_AUTO_TEST_CASE(include_cycle_is_an_error) {
  std::string msg = load_error({{data("cycle_a.toml")}, {}});
  BOOST_TEST(contains(msg, "include cycle"));
  BOOST_TEST(contains(msg, "cycle_a.toml"));
}

BOOST_AUTO_TEST_CASE(missing_file_and_missing_include) {
  BOOST_TEST(contains(load_error({{data("nope.toml")}, {}}), "No such file or directory"));
}

BOOST_AUTO_TEST_CASE(set_errors) {
  BOOST_TEST(contains(load_error({{}, {"model.layers"}}), "section.key=value"));
  BOOST_TEST(contains(load_error({{}, {"layers=2"}}), "no section"));
  BOOST_TEST(contains(load_error({{}, {"model.layers=abc"}}), "expected an integer, got string \"abc\""));
  BOOST_TEST(contains(load_error({{}, {"model.layres=2"}}), "did you mean 'model.layers'"));
}

BOOST_AUTO_TEST_CASE(lists_and_scalars_for_either_types) {
  Schema s;
  s.add("plan", "tp", KeyType::IntOrIntList, nullptr, "tp");
  s.add_choice("plan", "recompute", KeyType::StringOrStringList, nullptr, {"none", "full"}, "r");
  s.add("plan", "peak", KeyType::Float, 1.5, "f");
  ConfigSources src;
  src.sets = {"plan.tp=[2, 4, 8]", "plan.recompute=full", "plan.peak=3"};
  Config cfg = load_config(src, s);
  BOOST_TEST(cfg.get_ints("plan.tp") == (std::vector<int64_t>{2, 4, 8}));
  BOOST_TEST(cfg.get_strings("plan.recompute") == (std::vector<std::string>{"full"}));
  BOOST_TEST(cfg.get_float("plan.peak") == 3.0);
  src.sets = {"plan.recompute=[\"none\", \"ful\"]"};
  try {
    load_config(src, s);
    BOOST_FAIL("expected error");
  } catch (const UsageError& e) {
    BOOST_TEST(contains(e.what(), "did you mean \"full\""));
  }
}

BOOST_AUTO_TEST_CASE(print_config_round_trips_through_toml) {
  ConfigSources src;
  src.files = {data("experiment.toml")};
  src.sets = {"run.dir=runs/with \"quotes\""};
  Config cfg = load_config(src);
  std::string annotated = cfg.to_toml(true);
  BOOST_TEST(contains(annotated, "layers = 6"));
  BOOST_TEST(contains(annotated, "experiment.toml:5:1"));
  BOOST_TEST(contains(annotated, "# default"));
  BOOST_TEST(contains(annotated, "--set"));
  // The plain form is valid TOML that reproduces the same config.
  std::string path = "/tmp/cairn_config_roundtrip.toml";
  FILE* f = fopen(path.c_str(), "w");
  std::string plain = cfg.to_toml(false);
  fwrite(plain.data(), 1, plain.size(), f);
  fclose(f);
  Config again = load_config({{path}, {}});
  BOOST_TEST(again.to_json() == cfg.to_json());
}

BOOST_AUTO_TEST_CASE(json_to_toml_writes_nested_tables) {
  json j = {{"parallel", {{"dp", 4}, {"tp", 2}, {"recompute", "full"}}}, {"fabric", {{"intra", {{"alpha_us", 2.5}}}}}};
  std::string text = json_to_toml(j);
  std::string path = "/tmp/cairn_json_to_toml.toml";
  FILE* f = fopen(path.c_str(), "w");
  fwrite(text.data(), 1, text.size(), f);
  fclose(f);
  json back = read_toml_file_as_json(path);
  BOOST_TEST(back == j);
}

// Floats are written in their shortest exact form, whole numbers below a billion with trailing zeros in fixed
// notation (90.0, not the 9e+01 that %g's shortest form gives), and read back equal.
BOOST_AUTO_TEST_CASE(json_to_toml_writes_whole_floats_in_fixed_notation) {
  const json j = {{"sweep",
                   {{"min_busbw", 90.0},
                    {"big", 123000.0},
                    {"huge", 1.5e12},
                    {"tiny", 2.5e-7},
                    {"third", 1.0 / 3},
                    {"neg", -1200.0}}}};
  const std::string text = json_to_toml(j);
  BOOST_TEST(text.find("min_busbw = 90.0") != std::string::npos, text);
  BOOST_TEST(text.find("big = 123000.0") != std::string::npos, text);
  BOOST_TEST(text.find("huge = 1.5e+12") != std::string::npos, text);
  BOOST_TEST(text.find("neg = -1200.0") != std::string::npos, text);
  BOOST_TEST(text.find("tiny = 2.5e-07") != std::string::npos, text);
  const std::string path = "/tmp/cairn_json_to_toml_floats.toml";
  FILE* f = fopen(path.c_str(), "w");
  fwrite(text.data(), 1, text.size(), f);
  fclose(f);
  BOOST_TEST(read_toml_file_as_json(path) == j);
  std::remove(path.c_str());
}

BOOST_AUTO_TEST_CASE(edit_distance_basics) {
  BOOST_TEST(edit_distance("hiden", "hidden") == 1u);
  BOOST_TEST(edit_distance("", "abc") == 3u);
}

namespace {
// The temporary files of temp_toml, removed when the test program ends.
struct TempFiles {
  std::vector<std::string> paths;
  ~TempFiles() {
    for (const auto& p : paths) unlink(p.c_str());
  }
} temp_files;

// Writes `text` to a fresh temporary file and returns its path (each test its own: ctest runs in parallel).
std::string temp_toml(const std::string& text) {
  char name[] = "/tmp/cairn_config_test.XXXXXX";
  int fd = mkstemp(name);
  BOOST_REQUIRE(fd >= 0);
  temp_files.paths.push_back(name);
  BOOST_REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
  return name;
}
// load_error() with the environment variable `name` set to `value` meanwhile.
std::string env_load_error(const char* name, const std::string& value) {
  setenv(name, value.c_str(), 1);
  std::string msg = load_error({});
  unsetenv(name);
  return msg;
}
}  // namespace

BOOST_AUTO_TEST_CASE(print_config_round_trips_control_characters_quotes_and_unicode) {
  // Every kind of character a string may hold, from --set and from the environment; the annotated
  // --print-config text (origins included: they quote the --set arguments) must load back to the same config.
  const std::string nasty = std::string("line1\nline2\ttab \x7f del \x01 \"quoted\" back\\slash caf\xc3\xa9 ") +
                            "\xe2\x82\xac \xf0\x9f\x98\x80 end";
  setenv("CAIRN_REPORT_TITLE", ("env" + nasty).c_str(), 1);
  ConfigSources src;
  src.sets = {"run.name=" + nasty, "run.dir=\"" + std::string("runs/\\u007f\\n") + "\"",
              "report.runs=[\"a\\nb\", \"\\u0000c\"]", "eval.task.\"wiki.test\"={kind=\"perplexity\", data=\"d\\te\"}"};
  Config cfg = load_config(src);
  unsetenv("CAIRN_REPORT_TITLE");
  BOOST_TEST(cfg.get_string("run.name") == nasty);  // nothing dropped after the newline
  BOOST_TEST(cfg.get_string("report.title") == "env" + nasty);
  BOOST_TEST(cfg.get_string("run.dir") == std::string("runs/\x7f\n"));
  BOOST_TEST(cfg.get_strings("report.runs")[1] == std::string("\0c", 2));
  for (bool with_origins : {true, false}) {
    const std::string text = cfg.to_toml(with_origins);
    for (char c : text) BOOST_TEST((c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f) || c < 0));
    Config again = load_config({{temp_toml(text)}, {}, false});
    BOOST_TEST(again.to_json() == cfg.to_json());
    BOOST_TEST(again.get_string("run.name") == nasty);
  }
}

BOOST_AUTO_TEST_CASE(set_value_with_a_second_toml_value_is_an_error_not_dropped) {
  // "5\nmodel.layers = 3" parses as two keys: the second was dropped silently.
  std::string msg = load_error({{}, {"train.steps=5\nlayers = 3"}});
  BOOST_TEST(contains(msg, "--set train.steps=5"));
  BOOST_TEST(contains(msg, "more than one TOML value"));
  // Text that is no TOML value stays one string, newline and all.
  ConfigSources src;
  src.sets = {"run.name=first line\nsecond = line"};
  BOOST_TEST(load_config(src).get_string("run.name") == "first line\nsecond = line");
  msg = env_load_error("CAIRN_TRAIN_STEPS", "5\n[model]\nlayers = 3");
  BOOST_TEST(contains(msg, "env CAIRN_TRAIN_STEPS"));
  BOOST_TEST(contains(msg, "more than one TOML value"));
}

BOOST_AUTO_TEST_CASE(invalid_utf8_from_set_or_env_is_an_error) {
  std::string msg = load_error({{}, {"run.name=caf\xe9"}});
  BOOST_TEST(contains(msg, "run.name"));
  BOOST_TEST(contains(msg, "not valid UTF-8"));
  msg = env_load_error("CAIRN_RUN_NAME", "\xc3\x28");
  BOOST_TEST(contains(msg, "env CAIRN_RUN_NAME"));
  BOOST_TEST(contains(msg, "not valid UTF-8"));
}

BOOST_AUTO_TEST_CASE(a_later_table_section_merges_an_inline_table_replaces) {
  const std::string task = temp_toml("[eval.task.mc]\nkind = \"multiple_choice\"\npath = \"x.jsonl\"\nlimit = 7\n");
  // The including file (and a later --config) sets the keys its [eval.task.mc] names, keeping the others.
  Config merged = load_config({{temp_toml("include = \"" + task + "\"\n[eval.task.mc]\nlimit = 50\n")}, {}, false});
  const json mc = merged.section("eval.task")["mc"];
  BOOST_TEST(mc["kind"] == "multiple_choice");
  BOOST_TEST(mc["path"] == "x.jsonl");
  BOOST_TEST(mc["limit"] == 50);
  Config layered = load_config({{task, temp_toml("[eval.task.mc]\nlimit = 9\n")}, {}, false});
  BOOST_TEST(layered.section("eval.task")["mc"]["path"] == "x.jsonl");
  BOOST_TEST(layered.section("eval.task")["mc"]["limit"] == 9);
  // An inline table is the whole value, as with --set eval.task.mc={...}.
  Config replaced = load_config({{task, temp_toml("[eval.task]\nmc = { kind = \"perplexity\" }\n")}, {}, false});
  BOOST_TEST(replaced.section("eval.task")["mc"] == json({{"kind", "perplexity"}}));
}

BOOST_AUTO_TEST_CASE(quoted_dotted_keys_name_one_table) {
  const std::string path = temp_toml("[eval]\ntasks = [\"wiki.test\", \"my task\"]\n"
                                     "[eval.task.\"wiki.test\"]\nkind = \"perplexity\"\n"
                                     "[eval.task.\"my task\"]\nkind = \"multiple_choice\"\npath = \"x.jsonl\"\n"
                                     "[report.gates]\n\"val.loss\" = { max = 1 }\n");
  Config cfg = load_config({{path}, {}, false});
  json tasks = cfg.section("eval.task");
  BOOST_TEST(tasks.size() == 2u);
  BOOST_TEST(tasks["wiki.test"]["kind"] == "perplexity");
  BOOST_TEST(tasks["my task"]["path"] == "x.jsonl");
  BOOST_TEST(cfg.section("report.gates")["val.loss"]["max"] == 1);
  BOOST_TEST(contains(cfg.origin("eval.task.\"wiki.test\"").where, ":3:"));
  BOOST_TEST(cfg.has("eval.task.'wiki.test'"));
  BOOST_TEST(cfg.to_json()["eval"]["task"]["wiki.test"]["kind"] == "perplexity");
  // --print-config writes them quoted, and they load back.
  const std::string text = cfg.to_toml(true);
  BOOST_TEST(contains(text, "\"wiki.test\" = { kind = \"perplexity\" }"));
  Config again = load_config({{temp_toml(text)}, {}, false});
  BOOST_TEST(again.to_json() == cfg.to_json());
  // The same from --set; an unterminated quote is an error naming the argument.
  ConfigSources src;
  src.sets = {"eval.task.\"a.b=c\" = {kind=\"perplexity\"}"};
  BOOST_TEST(load_config(src).section("eval.task")["a.b=c"]["kind"] == "perplexity");
  BOOST_TEST(
      contains(load_error({{}, {"eval.task.\"a.b={kind=1}"}}), "--set eval.task.\"a.b={kind=1}: unterminated \""));
  BOOST_TEST(split_dotted("a.b.\"c.d\"").first == "a.b");
  BOOST_TEST(split_dotted("a.b.\"c.d\"").second == "c.d");
  BOOST_TEST(dotted_name("eval.task", "c.d") == "eval.task.\"c.d\"");
}

BOOST_AUTO_TEST_CASE(unknown_key_in_a_task_table_is_an_error_with_a_suggestion) {
  std::string msg =
      load_error({{temp_toml("[eval.task.mc]\nkind = \"multiple_choice\"\npth = \"x.jsonl\"\n")}, {}, false});
  BOOST_TEST(contains(msg, ":3:1: eval.task.mc: unknown key 'pth' (did you mean 'path'?)"));
  msg = load_error({{}, {"eval.task.mc={kind=\"perplexity\", bogus=1}"}, false});
  BOOST_TEST(contains(msg, "--set eval.task.mc="));
  BOOST_TEST(contains(msg, "unknown key 'bogus' (known keys: kind, data"));
  // report.gates tables are checked by cairn-report (metric names): any key passes here.
  BOOST_CHECK_NO_THROW(load_config({{}, {"report.gates.val_loss={max_increase=0.1}"}, false}));
}

BOOST_AUTO_TEST_CASE(nan_is_shown_as_nan_not_null) {
  std::string msg = load_error({{}, {"train.lr=nan"}, false});
  BOOST_TEST(contains(msg, "value nan is not finite"));
  BOOST_TEST(!contains(msg, "null"));
  msg = load_error({{temp_toml("[train]\nlr = -inf\n")}, {}, false});
  BOOST_TEST(contains(msg, "value -inf is not finite"));
  BOOST_TEST(config_value_text(json(std::nan(""))) == "nan");
  BOOST_TEST(config_value_text(json::array({1.5, std::nan("")})) == "[1.5, nan]");
}

BOOST_AUTO_TEST_CASE(string_for_number_and_number_for_string_give_quoting_hints) {
  std::string msg = load_error({{}, {"train.lr=abc"}, false});
  BOOST_TEST(contains(msg, "--set train.lr=abc: train.lr: expected a number, got string \"abc\""));
  BOOST_TEST(contains(msg, "write a number without quotes, e.g. --set 'train.lr="));
  msg = load_error({{temp_toml("[train]\nlr = \"0.001\"\n")}, {}, false});
  BOOST_TEST(contains(msg, "(write a number without quotes: lr = 0.001)"));
  msg = load_error({{}, {"run.dir=2024"}, false});
  BOOST_TEST(contains(msg, "expected a string, got integer 2024 (to give it as a string, quote it: --set "
                           "'run.dir=\"2024\"')"));
  msg = env_load_error("CAIRN_RUN_NAME", "1e3");
  BOOST_TEST(contains(msg, "quote it: CAIRN_RUN_NAME='\"1e3\"'"));
  msg = load_error({{temp_toml("[report]\nruns = [1, \"b\"]\n")}, {}, false});
  BOOST_TEST(contains(msg, "(quote each element: runs = [\"1\", \"b\"])"));
  msg = load_error({{}, {"train.tensorboard=yes"}, false});
  BOOST_TEST(contains(msg, "write true or false without quotes"));
}

BOOST_AUTO_TEST_CASE(integer_keys_take_whole_numbers_in_exponent_or_float_notation) {
  // From --set, the environment and a TOML file (where 1e10 and 4.0 are floats): stored as the integers they are.
  setenv("CAIRN_TRAIN_STEPS", "2e3", 1);
  ConfigSources src;
  src.files = {temp_toml("[model]\nlayers = 4.0\n[data.mix]\ntokens = 1e10\n")};
  src.sets = {"data.seed=1.5e15", "model.hidden=96.0"};
  Config cfg = load_config(src);
  unsetenv("CAIRN_TRAIN_STEPS");
  BOOST_TEST(cfg.get_int("train.steps") == 2000);
  BOOST_TEST(cfg.get_int("model.layers") == 4);
  BOOST_TEST(cfg.get_int("data.mix.tokens") == 10000000000);
  BOOST_TEST(cfg.get_int("data.seed") == 1500000000000000);
  BOOST_TEST(cfg.get_int("model.hidden") == 96);
  for (const char* k : {"train.steps", "model.layers", "data.mix.tokens", "data.seed"})
    BOOST_TEST(cfg.get(k).is_number_integer(), k);
  // --print-config writes them as integers, and they load back.
  const std::string text = cfg.to_toml(true);
  BOOST_TEST(contains(text, "tokens = 10000000000 "));
  BOOST_TEST(contains(text, "seed = 1500000000000000 "));
  BOOST_TEST(load_config({{temp_toml(text)}, {}, false}).to_json() == cfg.to_json());

  // Lists of integers and integer-or-list keys, and the ends of the 64-bit range.
  Schema s;
  s.add("k", "n", KeyType::Int, 0, "no range but int64's");
  s.add("k", "list", KeyType::IntList, json::array(), "list");
  s.add("k", "either", KeyType::IntOrIntList, nullptr, "either");
  src = {{}, {"k.n=-9200000000000000000", "k.list=[1e3, 2, 3.0]", "k.either=8e0"}, false};
  cfg = load_config(src, s);
  BOOST_TEST(cfg.get_int("k.n") == -9200000000000000000);
  BOOST_TEST(cfg.get_ints("k.list") == (std::vector<int64_t>{1000, 2, 3}));
  BOOST_TEST(cfg.get("k.list")[0].is_number_integer());
  BOOST_TEST(cfg.get_ints("k.either") == (std::vector<int64_t>{8}));
  BOOST_TEST(load_config({{}, {"k.n=9200000000000000000"}, false}, s).get_int("k.n") == 9200000000000000000);
}

BOOST_AUTO_TEST_CASE(integer_keys_refuse_fractions_and_values_out_of_range_naming_key_and_value) {
  std::string msg = load_error({{}, {"model.layers=1.5"}, false});
  BOOST_TEST(contains(msg, "--set model.layers=1.5: model.layers: expected an integer, got number 1.5"));
  msg = load_error({{}, {"model.layers=1e-3"}, false});
  BOOST_TEST(contains(msg, "model.layers: expected an integer, got number 0.001"));
  msg = env_load_error("CAIRN_TRAIN_STEPS", "2.5e0");
  BOOST_TEST(contains(msg, "env CAIRN_TRAIN_STEPS: train.steps: expected an integer, got number 2.5"));
  msg = load_error({{temp_toml("[model]\nlayers = 1e-3\n")}, {}, false});
  BOOST_TEST(contains(msg, ":2:1: model.layers: expected an integer, got number 0.001"));
  // The key's own range first (train.steps is at most 1e12), then int64's.
  msg = load_error({{}, {"train.steps=1e13"}, false});
  BOOST_TEST(contains(msg, "train.steps: value 1e+13 is above the maximum 1000000000000"));
  Schema s;
  s.add("k", "n", KeyType::Int, 0, "no range but int64's");
  s.add("k", "list", KeyType::IntList, json::array(), "list");
  auto error = [&](const std::string& set) {
    try {
      load_config({{}, {set}, false}, s);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("loaded");
  };
  BOOST_TEST(contains(error("k.n=1e19"), "k.n: value 1e+19 is outside the 64-bit integer range"));
  BOOST_TEST(contains(error("k.n=9223372036854775808.0"), "is outside the 64-bit integer range"));
  BOOST_TEST(contains(error("k.n=-1e300"), "value -1e+300 is outside the 64-bit integer range"));
  BOOST_TEST(contains(error("k.list=[1, 2.5]"), "k.list: expected a list of integers, got array [1, 2.5]"));
  BOOST_TEST(contains(error("k.list=[1, 1e20]"), "k.list: value 1e+20 is outside the 64-bit integer range"));
  // Past 2^53 a float holds only some integers: 1.0000000000000001e18 would silently become ...128.
  BOOST_TEST(contains(error("k.n=1.0000000000000001e18"), "is past 2^53, where a float cannot say which integer"));
  BOOST_TEST(contains(error("k.n=1.0000000000000001e18"), "reads as 1000000000000000128"));
  BOOST_TEST(contains(error("k.n=-9223372036854775808.0"), "write the integer without exponent or fraction"));
  BOOST_TEST(error("k.n=-9223372036854775808") == "loaded");
  BOOST_TEST(error("k.n=9007199254740991.0") == "loaded");  // below 2^53 every integer is exact
  // From 2^53 on a float may be a neighbour rounded to the integer it reads as (9007199254740993.0 reads as 2^53,
  // 10000000000000001.0 as 1e16, whose shortest form looks exact): every float is refused there, integers are exact.
  BOOST_TEST(contains(error("k.n=9007199254740993.0"), "reads as 9007199254740992"));
  BOOST_TEST(contains(error("k.n=9007199254740992.0"), "is past 2^53"));
  BOOST_TEST(contains(error("k.n=10000000000000001.0"), "reads as 10000000000000000"));
  BOOST_TEST(contains(error("k.n=9.2e18"), "write the integer without exponent or fraction"));
  BOOST_TEST(contains(error("k.n=-1.5e17"), "is past 2^53"));
  BOOST_TEST(error("k.n=10000000000000001") == "loaded");
  BOOST_TEST(error("k.n=9e15") == "loaded");  // below 2^53
  BOOST_TEST(contains(error("k.n=inf"), "k.n: expected an integer, got number inf"));
  BOOST_TEST(contains(error("k.n=nan"), "k.n: expected an integer, got number nan"));
}

// A step range is checked where it is set, in every tool (cairn-plan and --print-config passed "abc" that only
// cairn-train's run refused).
BOOST_AUTO_TEST_CASE(step_ranges_are_checked_where_they_are_set) {
  BOOST_TEST(contains(load_error({{}, {"train.trace_steps=\"5:2\""}}),
                      "train.trace_steps: \"5:2\" is not a range of steps: expected a:b with 1 <= a < b"));
  const std::string file = temp_toml("[train]\ntrace_steps = \"0:3\"\n");
  const std::string msg = load_error({{file}, {}, false});
  BOOST_TEST(contains(msg, ":2:1: train.trace_steps: \"0:3\" is not a range of steps"), msg);
  BOOST_TEST(load_config({{}, {"train.trace_steps=\"2:4\""}}).get_string("train.trace_steps") == "2:4");
  BOOST_TEST(parse_step_range("3:7").first == 3);
  BOOST_TEST(parse_step_range("3:7").second == 7);
  for (const char* bad : {" 5:7", "5: 7", "+5:7", "5:+7", "5:7 "}) BOOST_CHECK_THROW(parse_step_range(bad), UsageError);
}
