// cairn-reshard: raw text -> balanced, checksummed token shards; M -> N shards; Megatron/llm.c
// conversion; verification and statistics (subcommands build, reshard, convert, verify, stats).
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <optional>

#include "cairn/cli.h"
#include "cairn/mpi.h"
#include "reshard.h"

int main(int argc, char** argv) {
  return cairn::run_tool("cairn-reshard", argc, argv, [&]() -> int {
    CLI::App app{"cairn-reshard: tokenize, reshard, convert, verify and describe token datasets"};
    app.require_subcommand(1);
    cairn::CommonOptions opts;
    cairn::add_common_options(app, opts);
    std::vector<std::string> inputs;
    std::string tokenizer, vocab, merges, tokenizer_json, delimiter, jsonl_field, format, from, to;
    std::string llmc_format = "auto";
    int64_t shards = 0, seed = -2, threads = -1;
    bool split_docs = false, skip_bad = false;

    auto* build = app.add_subcommand("build", "raw text (files, directories, - for stdin; .gz ok) -> token shards");
    auto* reshard = app.add_subcommand("reshard", "M shards -> N shards balanced by tokens (optionally shuffled)");
    auto* convert = app.add_subcommand("convert", "Megatron-LM .bin/.idx or llm.c .bin <-> cairn shards");
    auto* verify = app.add_subcommand("verify", "check checksums, offsets, token ids and index.json; exit 3 if wrong");
    auto* stats = app.add_subcommand("stats", "tokens, documents, length histogram, balance, bytes/token");
    for (auto* sub : {build, reshard, convert, verify, stats}) {
      sub->fallthrough();  // common options (--out, --config, --set, ...) may follow the subcommand
      sub->add_option("inputs", inputs, "inputs (files, directories, datasets, - for stdin)");
    }
    for (auto* sub : {build, reshard, convert}) {
      sub->add_option("--shards", shards, "number of output shards ([data] shards)");
      sub->add_option("--seed", seed, "shuffle documents with this seed, -1 keeps order ([data] seed)");
      sub->add_option("--threads", threads, "worker threads, 0 = all cores ([data] threads)");
      sub->add_flag("--split-docs", split_docs, "split documents at shard boundaries for exact balance");
    }
    for (auto* sub : {build, convert}) {
      sub->add_option("--tokenizer", tokenizer, "bytes | gpt2 | hf ([data] tokenizer)");
      sub->add_option("--vocab", vocab, "GPT-2 encoder.json");
      sub->add_option("--merges", merges, "GPT-2 vocab.bpe");
      sub->add_option("--tokenizer-json", tokenizer_json, "Hugging Face tokenizer.json (BPE)");
    }
    build->add_option("--delimiter", delimiter, "a line equal to this separates documents (e.g. %)");
    build->add_option("--jsonl-field", jsonl_field, "JSONL field holding the text (default text)");
    build->add_option("--format", format, "auto | text | jsonl");
    build->add_flag("--skip-bad", skip_bad, "skip and count malformed records instead of failing");
    convert->add_option("--from", from, "import: megatron | llmc")->check(CLI::IsMember({"megatron", "llmc"}));
    convert->add_option("--to", to, "export: megatron (--out is the .bin/.idx prefix) | llmc (--out is a directory)")
        ->check(CLI::IsMember({"megatron", "llmc"}));
    convert->add_option("--llmc-format", llmc_format,
                        "llm.c export variant: gpt-2 (magic 20240520, uint16) | llama-3 (magic 20240801, uint32) | "
                        "auto (llama-3 when the vocabulary exceeds 65536 ids)")
        ->check(CLI::IsMember({"auto", "gpt-2", "llama-3"}));
    app.footer("--out DIR is the output dataset directory (default: [data] path, else <run.dir>/data).");
    cairn::parse_cli(app, argc, argv);

    // For this tool --out names the dataset directory itself, not the run directory.
    std::string out = opts.out;
    opts.out.clear();
    cairn::ToolSettings settings;
    auto str = [&](const char* key, const std::string& v) {
      if (!v.empty()) settings.emplace_back(std::string("data.") + key, v);
    };
    str("tokenizer", tokenizer);
    str("vocab", vocab);
    str("merges", merges);
    str("tokenizer_json", tokenizer_json);
    str("delimiter", delimiter);
    str("jsonl_field", jsonl_field);
    str("format", format);
    if (shards > 0) settings.emplace_back("data.shards", shards);
    if (seed >= -1) settings.emplace_back("data.seed", seed);
    if (threads >= 0) settings.emplace_back("data.threads", threads);
    if (split_docs) settings.emplace_back("data.split_docs", true);
    if (skip_bad) settings.emplace_back("data.skip_bad", true);
    cairn::Config cfg = cairn::load_tool_config(opts, settings);
    if (cairn::maybe_print_config(opts, cfg)) return 0;
    // MPI only when a launcher started us (mpirun, srun with PMI/PMIx): a plain run stays a plain
    // process and avoids MPI's singleton start-up.
    std::optional<cairn::mpi::Session> session;
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
      if (std::getenv(v)) {
        session.emplace(&argc, &argv);
        break;
      }
    using namespace cairn::reshard;
    if (build->parsed()) return run_build(cfg, inputs, out, opts.json_path);
    if (reshard->parsed()) return run_reshard(cfg, inputs, out, opts.json_path);
    if (convert->parsed()) return run_convert(cfg, from, to, inputs, out, llmc_format);
    if (verify->parsed()) return run_verify(cfg, inputs.empty() && !out.empty() ? std::vector<std::string>{out} : inputs, opts.json_path);
    return run_stats(cfg, inputs.empty() && !out.empty() ? std::vector<std::string>{out} : inputs, opts.json_path);
  });
}
