// cairn-reshard's command line (reshard_main): the subcommands' flags -> config, MPI when launched by one, the run.
#include <malloc.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <string>

#include "cairn/cli.h"
#include "cairn/config.h"
#include "cairn/config_section.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/mpi.h"
#include "reshard.h"

namespace {

// --out names what the run writes (the dataset directory; convert --to megatron: the .bin/.idx prefix): one under a
// regular file is a usage error before any input is read, not a failure once they are all tokenized. The common
// check of the run directory does not see it (here --out is not the run directory).
void check_output_path(const std::string& out, bool prefix) {
  // A directory this process may create and write in (a read-only mount, another user's directory: exit 2 now, not
  // exit 1 after the inputs were read and tokenized).
  const std::string dir = prefix ? std::filesystem::path(out).parent_path().string() : out;
  if (const std::string why = cairn::creatable_dir_problem(dir); !why.empty())
    throw cairn::UsageError(cairn::file_message("--out: cannot write", out, why));
}

// Why no subcommand ran (CLI11 only says one is required): the word given instead, with the closest
// valid subcommand to it and the list of them; "" when the parse failed for another reason.
std::string missing_subcommand(const CLI::App& app, const std::string& error) {
  std::string valid, given;
  std::vector<std::string> names;
  for (const std::string& a : app.remaining())
    if (!a.empty() && a[0] != '-') {
      given = a;
      break;
    }
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
    valid += (valid.empty() ? "" : ", ") + names.back();
  }
  const std::string best = cairn::closest_match(given, names);
  if (given.empty())
    return error.find("subcommand") == std::string::npos
               ? ""
               : "a subcommand is required: one of " + valid + " (see --help)";
  return "unknown subcommand \"" + given + "\"" + (best.empty() ? "" : " (did you mean \"" + best + "\"?)") +
         "; the subcommands are " + valid + " (see --help)";
}

}  // namespace

int cairn::reshard::reshard_main(int argc, char** argv, const ReshardFaults& faults) {
  // Freed blocks stay in the heap for the next allocation instead of going back to the kernel: every
  // HDF5 file open callocs a metadata cache of several hundred KB, and on VMs each fresh page costs a
  // fault that is slower than the copy of a page of tokens.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  return cairn::run_tool("cairn-reshard", argc, argv, [&]() -> int {
    CLI::App app{"cairn-reshard: tokenize, reshard, convert, verify and describe token datasets"};
    // At most one; none only with --print-config (the config every subcommand reads), checked after the parse.
    app.require_subcommand(0, 1);
    cairn::CommonOptions opts;
    cairn::add_common_options(app, opts);
    std::vector<std::string> inputs;
    std::string from, to;
    std::string llmc_format = "auto";

    auto* build = app.add_subcommand("build", "raw text (files, directories, - for stdin; .gz ok) -> token shards");
    auto* reshard = app.add_subcommand("reshard", "M shards -> N shards balanced by tokens (optionally shuffled)");
    auto* convert = app.add_subcommand("convert", "Megatron-LM .bin/.idx or llm.c .bin <-> cairn shards");
    auto* mix = app.add_subcommand(
        "mix", "datasets + weights -> one dataset whose order realises the weights (e.g. --weights 0.7,0.2,0.1)");
    auto* verify = app.add_subcommand("verify", "check checksums, offsets, token ids and index.json; exit 3 if wrong");
    auto* stats = app.add_subcommand("stats", "tokens, documents, length histogram, balance, bytes/token");
    for (auto* sub : {build, reshard, convert, mix, verify, stats}) {
      sub->fallthrough();  // common options (--out, --config, --set, ...) may follow the subcommand
      // Only build reads a stream (text on stdin); the others take files and dataset directories.
      sub->add_option("inputs", inputs,
                      sub == build ? "inputs (files, directories, - for stdin)" : "inputs (datasets, files)");
      sub->footer("Common options (--config, --set, --out, --json, --print-config, --log-level, ...) may follow the "
                  "subcommand: see cairn-reshard --help.");
    }
    // The [data] flags (declared in cairn/sections/data.h) of the keys each subcommand uses.
    cairn::ToolSettings settings;
    const std::set<std::string> output = {"--shards", "--seed", "--threads", "--split-docs"};
    const std::set<std::string> tokenizer = {"--tokenizer", "--vocab", "--merges", "--tokenizer-json", "--eot-token"};
    const std::set<std::string> text = {"--delimiter", "--jsonl-field", "--format", "--skip-bad"};
    auto data_flags = [&](CLI::App* sub, std::initializer_list<const std::set<std::string>*> groups) {
      const size_t before = sub->get_options().size();
      cairn::add_section_flags(*sub, "data", settings);
      std::vector<CLI::Option*> added = sub->get_options();
      for (size_t i = before; i < added.size(); ++i) {
        const std::string name = added[i]->get_name();
        if (std::none_of(groups.begin(), groups.end(), [&](const auto* g) { return g->count(name) > 0; }))
          sub->remove_option(added[i]);
      }
    };
    data_flags(build, {&output, &tokenizer, &text});
    data_flags(reshard, {&output});
    data_flags(convert, {&output, &tokenizer});
    data_flags(mix, {&output});
    cairn::add_section_flags(*mix, "data.mix", settings);
    mix->footer(
        "Inputs are datasets (cairn-reshard build/reshard output, one tokenizer), or [data.mix] sources. --seed "
        "shuffles each source's documents, afresh for every epoch of a repeated source (-1: stored order); the "
        "blend's order is the dataset's order. stats.json reports per-source tokens, epochs and the realised mix "
        "(docs/reshard-mix.md).");
    convert->add_option("--from", from, "import: megatron | llmc")->check(CLI::IsMember({"megatron", "llmc"}));
    convert->add_option("--to", to, "export: megatron (--out is the .bin/.idx prefix) | llmc (--out is a directory)")
        ->check(CLI::IsMember({"megatron", "llmc"}));
    convert
        ->add_option("--llmc-format", llmc_format,
                     "llm.c export variant: gpt-2 (magic 20240520, uint16) | llama-3 (magic 20240801, uint32) | "
                     "auto (llama-3 when the vocabulary exceeds 65536 ids)")
        ->check(CLI::IsMember({"auto", "gpt-2", "llama-3"}));
    // Here --out names the dataset itself (as samtools -o names its output), not a run directory: say so where
    // --help lists it, not only in a footer.
    app.get_option("--out")->description(
        "output dataset directory (default: [data] path, else <run.dir>/data); convert --to megatron: the .bin/.idx "
        "prefix");
    try {
      cairn::parse_cli(app, argc, argv);
      if (app.get_subcommands().empty() && !opts.print_config) throw cairn::UsageError("A subcommand is required");
    } catch (const cairn::UsageError& e) {
      const std::string why = app.get_subcommands().empty() ? missing_subcommand(app, e.what()) : "";
      if (why.empty()) throw;
      throw cairn::UsageError(why);
    }

    // For this tool --out names the dataset directory itself, not the run directory.
    std::string out = opts.out;
    opts.out.clear();
    cairn::Config cfg = cairn::load_tool_config(opts, settings);
    if (cairn::maybe_print_config(opts, cfg, inputs)) return 0;
    // MPI only when a launcher started us (mpirun, srun with PMI/PMIx): a plain run stays a plain
    // process and avoids MPI's singleton start-up.
    std::optional<cairn::mpi::Session> session;
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
      if (std::getenv(v)) {
        session.emplace(&argc, &argv);
        break;
      }
    if (!out.empty() && !verify->parsed() && !stats->parsed())
      check_output_path(out, convert->parsed() && to == "megatron");
    using namespace cairn::reshard;
    if (build->parsed()) return run_build(cfg, inputs, out, opts.json_path);
    if (reshard->parsed()) return run_reshard(cfg, inputs, out, opts.json_path);
    if (mix->parsed()) return run_mix(cfg, inputs, out, opts.json_path, faults);
    if (convert->parsed()) return run_convert(cfg, from, to, inputs, out, llmc_format, opts.json_path);
    if (verify->parsed())
      return run_verify(cfg, inputs.empty() && !out.empty() ? std::vector<std::string>{out} : inputs, opts.json_path,
                        faults);
    return run_stats(cfg, inputs.empty() && !out.empty() ? std::vector<std::string>{out} : inputs, opts.json_path);
  });
}
