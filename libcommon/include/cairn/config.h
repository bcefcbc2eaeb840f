// Typed, layered configuration: defaults < TOML file (with includes) < CAIRN_* env < --set.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cairn {

using json = nlohmann::json;

enum class KeyType {
  Bool,
  Int,
  Float,  // accepts integers too
  String,
  StringList,
  IntList,
  FloatList,
  IntOrIntList,        // `tp = 8` fixes a value, `tp = [4, 8]` restricts to a list
  StringOrStringList,  // `recompute = "full"` or `recompute = ["none", "full"]`
  Table,               // any inline table, e.g. a gate `{ max_increase = 0.02 }`
};
const char* key_type_name(KeyType t);

// One declared key: where it lives, its type, default, allowed values and a one-line doc.
struct KeySpec {
  std::string section;  // "train", or nested "report.gates"
  std::string key;      // "steps"; "*" declares an open section whose keys are free (type applies)
  KeyType type = KeyType::String;
  json default_value;  // null: no default (unset unless configured)
  std::optional<double> min, max;
  std::vector<std::string> choices;  // for String / StringList / StringOrStringList
  std::string doc;
  std::string flag;  // a tool flag that sets this key ("-n,--iters"), see add_section_flags
  // KeyType::Table only: the keys an inline table may hold (empty: any), so a misspelled key inside
  // `[eval.task.x]` is an error with a suggestion like any other unknown key.
  std::vector<std::string> table_keys;
  // KeyType::String only: a byte count written "64K"/"1G" or as a plain integer (maxbytes = 1048576), which is read
  // as its decimal text.
  bool byte_count = false;
  // KeyType::String only: a range of steps "a:b" (parse_step_range), or "" for none.
  bool step_range = false;
  // List keys only: an empty list is refused (a sweep of no collective, type, op or tier does nothing).
  bool non_empty = false;
};

// The registry of every section and key of every tool (llama.cpp-style one common registry),
// so that one experiment file configuring all stages validates in each tool.
class Schema {
 public:
  // Adds a key; returns *this so declarations chain.
  Schema& add(KeySpec spec);
  Schema& add(const std::string& section, const std::string& key, KeyType type, json default_value,
              const std::string& doc);
  // Adds a key with a numeric range or a list of choices.
  Schema& add_range(const std::string& section, const std::string& key, KeyType type, json default_value,
                    std::optional<double> min, std::optional<double> max, const std::string& doc);
  Schema& add_choice(const std::string& section, const std::string& key, KeyType type, json default_value,
                     std::vector<std::string> choices, const std::string& doc);
  // Declares a section whose keys are free-form, each of `type` (e.g. report.gates); for tables,
  // `table_keys` lists the keys each one may hold (empty: any).
  Schema& add_open_section(const std::string& section, KeyType type, const std::string& doc,
                           std::vector<std::string> table_keys = {});

  const KeySpec* find(const std::string& section, const std::string& key) const;
  bool has_section(const std::string& section) const;
  bool is_open_section(const std::string& section) const;
  bool has_subsections(const std::string& section) const;  // e.g. "report" for "report.gates"
  std::vector<std::string> sections() const;               // in declaration order
  const std::vector<KeySpec>& keys() const { return keys_; }
  // "did you mean" for a misspelled section.key ("" if nothing close).
  std::string suggest(const std::string& section, const std::string& key) const;
  std::string suggest_section(const std::string& section) const;

 private:
  std::vector<KeySpec> keys_;
  std::vector<std::string> section_order_;
};

// A byte count as nccl-tests' -b/-e/-i take it: whole bytes, or a decimal number with a K, M, G or T suffix (binary
// units; 1.5K = 1536; a trailing B is allowed); throws UsageError "<what>: '<text>' is not a size ...". The schema
// checks every ByteCount key with it, so every tool refuses what cairn-sweep would.
uint64_t parse_byte_count(const std::string& text, const std::string& what);

// A range of steps written "a:b" (steps a..b-1, numbered from 1 as in metrics.jsonl, 1 <= a < b); throws UsageError
// otherwise. The schema checks every StepRange key with it (cairn-train's trace_steps), where the value is set.
std::pair<int64_t, int64_t> parse_step_range(const std::string& text);

// The full registry: built once from every section's declaration (libcommon/src/schema_*.cpp).
const Schema& registry();

// Where a value came from, for --print-config and error messages.
struct Origin {
  enum Kind { Default, File, Env, Set, Program } kind = Default;
  std::string where;  // "configs/demo.toml:12:1", "CAIRN_TRAIN_STEPS", "--set", ""
  std::string describe() const;
};

// Inputs to load_config().
struct ConfigSources {
  std::vector<std::string> files;  // applied in order; each may `include = [...]` others
  std::vector<std::string> sets;   // "section.key=value" (TOML value syntax; bare words are strings)
  bool use_env = true;             // read CAIRN_<SECTION>_<KEY>
};

// The effective configuration: every declared key with its value and origin.
class Config {
 public:
  explicit Config(const Schema& schema = registry());

  bool has(const std::string& dotted) const;         // set and not null
  const json& get(const std::string& dotted) const;  // throws UsageError if undeclared
  int64_t get_int(const std::string& dotted) const;
  double get_float(const std::string& dotted) const;
  bool get_bool(const std::string& dotted) const;
  std::string get_string(const std::string& dotted) const;
  std::vector<std::string> get_strings(const std::string& dotted) const;  // scalar -> one element
  std::vector<int64_t> get_ints(const std::string& dotted) const;         // scalar -> one element
  std::vector<double> get_floats(const std::string& dotted) const;
  // All keys of a section (open sections: only those set) as a JSON object.
  json section(const std::string& section) const;
  const Origin& origin(const std::string& dotted) const;

  // Validates and sets one value (type, range, choices), e.g. a tool's own flag mapped to a key.
  // `dotted` is TOML's dotted-key syntax: a key of an open section may be quoted (eval.task."wiki.test").
  void set(const std::string& dotted, const json& value, Origin origin);
  // set() with the section and the (unquoted) key apart.
  void set(const std::string& section, const std::string& key, const json& value, Origin origin);
  // Applies "section.key=value" text (the --set syntax).
  void set_from_text(const std::string& assignment, Origin origin);

  // Effective config as TOML; with origins, each key carries "# <origin>" (for --print-config).
  std::string to_toml(bool with_origins = false, const std::vector<std::string>& only_sections = {}) const;
  json to_json() const;
  // Where each set key's value came from (Origin::describe), nested like to_json().
  json origins_json() const;
  // Config files that were read (main files and includes), for provenance.
  const std::vector<std::string>& files_read() const { return files_read_; }

  const Schema& schema() const { return *schema_; }

 private:
  friend Config load_config(const ConfigSources&, const Schema&);
  // set_from_text for a key inside a table value (eval.task.mc.limit): false when `parts` name no such key.
  bool set_inside_table(const std::vector<std::string>& parts, const std::string& text, const Origin& origin);
  struct Entry {
    json value;
    Origin origin;
    std::string section, key;  // key unquoted: "wiki.test" of eval.task."wiki.test"
  };
  // Every set key as JSON nested by section, each holding value_of(entry).
  template <class F>
  json nested(F value_of) const;
  const Schema* schema_;
  std::map<std::string, Entry> values_;
  std::vector<std::string> files_read_;
};

// A value a tool's own flag gives a config key, ranked with --set (after the env) and validated like any key;
// `flag` ("--steps") names it in errors and --print-config origins.
struct ToolSetting {
  std::string key;  // "sweep.iters"
  json value;
  std::string flag;
  ToolSetting(std::string k, json v, std::string f = "") : key(std::move(k)), value(std::move(v)), flag(std::move(f)) {}
};
using ToolSettings = std::vector<ToolSetting>;

// Builds the effective config from the sources (see ConfigSources), validating everything.
// Errors are UsageError naming file:line:col, the key, what was expected and a suggestion.
Config load_config(const ConfigSources& sources, const Schema& schema = registry());

// Parses a TOML file into a Config layer for tests and tools that read other tools' TOML outputs
// (e.g. fabric.toml, best.toml) without the registry: returns the file as JSON.
json read_toml_file_as_json(const std::string& path);
// Serialises a JSON object of tables as TOML text (for files tools write, e.g. best.toml).
std::string json_to_toml(const json& tables);

// Typed reading of the files stages exchange (index.json, DONE, fabric.toml, ...): every accessor
// checks the key's type and range and throws UsageError (exit 2)
//   `malformed <kind> "<file>": key "<path.to.key>": expected <expectation>, got <value>`
// so no raw library message (json type_error, ...) reaches the user.
class JsonFields {
 public:
  JsonFields(const json& j, std::string file, std::string kind, std::string prefix = "");
  const json& raw() const { return *j_; }
  const std::string& file() const { return file_; }
  // Present and not null.
  bool has(const std::string& key) const;
  uint64_t u64(const std::string& key, uint64_t max = UINT64_MAX) const;
  uint64_t u64_or(const std::string& key, uint64_t dflt, uint64_t max = UINT64_MAX) const;
  int64_t i64(const std::string& key, int64_t min, int64_t max) const;
  int64_t i64_or(const std::string& key, int64_t dflt, int64_t min, int64_t max) const;
  // Finite numbers in [min, max] (integers accepted).
  double number(const std::string& key, double min, double max) const;
  double number_or(const std::string& key, double dflt, double min, double max) const;
  std::string str(const std::string& key) const;
  std::string str_or(const std::string& key, const std::string& dflt) const;
  bool boolean_or(const std::string& key, bool dflt) const;
  JsonFields object(const std::string& key) const;                          // required object
  const json& array(const std::string& key, bool non_empty = false) const;  // required array
  // A reader for a nested value (an array element, an object member) named `key` under this one.
  JsonFields nested(const json& value, const std::string& key) const;
  // The dotted name of `key` under this reader ("shards[3].xxh64").
  std::string key_path(const std::string& key) const;
  [[noreturn]] void fail(const std::string& key, const std::string& expectation) const;
  // fail() for a value that is not a member of this object, e.g. an array element named "merges[3]".
  [[noreturn]] void fail_value(const std::string& key, const json& value, const std::string& expectation) const;

 private:
  const json* j_;
  std::string file_, kind_, prefix_;
};

// nlohmann's exception text without its "[json.exception.parse_error.101] " prefix and the echo of
// the text it last read (which can be kilobytes of provenance): what a user is shown.
std::string json_error_text(const std::exception& e);
// Parses the JSON text of `file`. Invalid JSON, including numbers a double cannot hold (1e999999,
// which nlohmann reports as out_of_range, not parse_error), throws UsageError (exit 2)
//   `malformed <kind> "<file>": invalid JSON: <reason>`.
json parse_json_text(const std::string& text, const std::string& file, const std::string& kind);

// Splits "a.b.c" into section "a.b" and key "c". Parts may be quoted as in TOML: `eval.task."wiki.test"` is
// section "eval.task", key "wiki.test". Throws UsageError on an unterminated quote.
std::pair<std::string, std::string> split_dotted(const std::string& dotted);
// The parts of a dotted name, quotes removed: `eval.task."wiki.test".limit` is eval, task, wiki.test, limit.
std::vector<std::string> dotted_parts(const std::string& dotted);
// The dotted name of a key: section + "." + the key, quoted when it is not a bare TOML key.
std::string dotted_name(const std::string& section, const std::string& key);
// A config value as TOML writes it (nan, inf, "quoted \n"), shortened for error messages.
std::string config_value_text(const json& v);
// A value as TOML writes it, in full (config_value_text shortens it).
std::string toml_value_text(const json& v);
// Text with its control characters and bytes that are not UTF-8 written as escapes (\n, \x01, \xff), for one-line
// messages and `# comments` of --print-config: a TOML comment holds no control character but tab, and only UTF-8.
std::string printable_text(const std::string& s);
// Parses the value of a `--set section.key=value` or `CAIRN_<SECTION>_<KEY>` assignment: TOML value
// syntax, and text that is not one TOML value (a bare word, a path) is a string.
json parse_config_value(const std::string& text);
// Edit distance, for suggestions.
size_t edit_distance(const std::string& a, const std::string& b);
// The candidate closest to `typed` and close enough to suggest ("did you mean"); "" when none is.
std::string closest_match(const std::string& typed, const std::vector<std::string>& candidates);

}  // namespace cairn
