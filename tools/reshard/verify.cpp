// `verify` (checksums, offsets, token ranges, index consistency; exit 3 on any problem) and `stats`.
#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>

#include "cairn/cli.h"
#include "cairn/config.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/json_text.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "reshard.h"

namespace cairn::reshard {

namespace fs = std::filesystem;

namespace {

// A shard's attributes against index.json: format, vocabulary, end-of-text, tokenizer, place in the dataset.
void check_shard_attributes(const json& a, const shards::Dataset& ds, size_t i, const shards::Shard& sh,
                            const std::function<void(const std::string&)>& problem) {
  const uint32_t vocab = ds.vocab_size(), eot = ds.eot_id();
  const std::string tok_id = ds.tokenizer_id();
  if (a.value("format_version", 0) != shards::kFormatVersion) problem("format_version attribute is not 1");
  if (a.value("vocab_size", int64_t{-1}) != static_cast<int64_t>(vocab))
    problem(strprintf("vocab_size attribute %lld differs from index.json %u",
                      static_cast<long long>(a.value("vocab_size", int64_t{-1})), vocab));
  if (a.value("eot_id", int64_t{-1}) != static_cast<int64_t>(eot)) problem("eot_id attribute differs from index.json");
  if (a.value("tokenizer", "") != tok_id)
    problem("tokenizer attribute \"" + printable_text(a.value("tokenizer", "")) + "\" differs from index.json \"" +
            printable_text(tok_id) + "\"");  // a damaged attribute's bytes: escaped, not sent to the terminal
  if (a.value("shard_index", int64_t{-1}) != static_cast<int64_t>(i))
    problem(strprintf("shard_index attribute is not %zu", i));
  if (a.value("shard_count", int64_t{-1}) != static_cast<int64_t>(ds.num_shards()))
    problem("shard_count attribute differs from the index");
  if (sh.token_width() != (shards::tokens_fit_uint16(vocab) ? 2 : 4))
    problem("token width does not match the vocabulary size");
}

// Shard i (open as `sh`) against its attributes and index.json entry: counts, offsets, token ids,
// end-of-text, checksums. Adds its tokens, documents and bytes to the dataset's totals. `checked(n)` says that its
// first n tokens are checked (a progress line that moves within a multi-GB shard).
void check_shard(const shards::Shard& sh, const shards::Dataset& ds, size_t i, const shards::ShardInfo& info,
                 bool split, const std::function<void(const std::string&)>& problem, uint64_t& tokens, uint64_t& docs,
                 uint64_t& bytes, const std::function<void(uint64_t)>& checked) {
  const uint32_t vocab = ds.vocab_size(), eot = ds.eot_id();
  json a = sh.attributes();
  check_shard_attributes(a, ds, i, sh, problem);
  const uint64_t n = sh.num_tokens(), nd = sh.num_documents();
  if (n != info.tokens)
    problem(strprintf("has %llu tokens, index.json says %llu", static_cast<unsigned long long>(n),
                      static_cast<unsigned long long>(info.tokens)));
  if (nd != info.documents)
    problem(strprintf("has %llu documents, index.json says %llu", static_cast<unsigned long long>(nd),
                      static_cast<unsigned long long>(info.documents)));
  // Offsets monotone, each document non-empty and ending with end-of-text.
  std::vector<uint64_t> ends(nd);
  for (uint64_t d = 0; d < nd; ++d) {
    uint64_t b = sh.doc_begin(d), e = sh.doc_end(d);
    ends[d] = e;
    if (e < b || e > n)
      problem(strprintf("document %llu: offsets [%llu, %llu) are not monotone within %llu tokens",
                        static_cast<unsigned long long>(d), static_cast<unsigned long long>(b),
                        static_cast<unsigned long long>(e), static_cast<unsigned long long>(n)));
    else if (e == b) problem(strprintf("document %llu is empty", static_cast<unsigned long long>(d)));
    bytes += sh.doc_bytes(d);
  }
  // Token ids below the vocabulary, checksum, end-of-text at document ends.
  std::unique_ptr<XXH64_state_t, XXH_errorcode (*)(XXH64_state_t*)> state(XXH64_createState(), XXH64_freeState);
  XXH64_state_t* st = state.get();
  XXH64_reset(st, 0);
  std::vector<uint32_t> buf;
  std::vector<uint16_t> narrow;
  const uint64_t step = 1 << 20;
  size_t next_doc = 0;
  for (uint64_t o = 0; o < n; o += step) {
    uint64_t c = std::min(step, n - o);
    buf.resize(c);
    sh.read_tokens(o, c, buf.data());
    sh.release_tokens(o, c);
    if (sh.token_width() == 2) {
      narrow.assign(buf.begin(), buf.end());
      XXH64_update(st, narrow.data(), c * 2);
    } else {
      XXH64_update(st, buf.data(), c * 4);
    }
    for (uint64_t k = 0; k < c; ++k)
      if (buf[k] >= vocab) {
        uint64_t pos = o + k;
        uint64_t d = std::upper_bound(ends.begin(), ends.end(), pos) - ends.begin();
        problem(strprintf("document %llu, token %llu: id %u is not below the vocabulary size %u",
                          static_cast<unsigned long long>(d), static_cast<unsigned long long>(pos), buf[k], vocab));
      }
    while (next_doc < nd && ends[next_doc] <= o + c) {
      uint64_t e = ends[next_doc];
      if (!split && e > o && e > sh.doc_begin(next_doc) && e <= n && buf[e - 1 - o] != eot)
        problem(strprintf("document %llu does not end with end-of-text (%u)", static_cast<unsigned long long>(next_doc),
                          eot));
      ++next_doc;
    }
    checked(o + c);
  }
  const uint64_t h = XXH64_digest(st);
  if (!a.contains("tokens_xxh64") || a["tokens_xxh64"].get<uint64_t>() != h)
    problem("tokens do not match the checksum stored in the file (xxh64 " + shards::hex64(h) + ")");
  if (h != info.xxh64)
    problem("tokens do not match index.json's checksum " + shards::hex64(info.xxh64) + " (computed " +
            shards::hex64(h) + ")");
  tokens += n;
  docs += nd;
}

size_t count_shard_files(const std::string& dir) {
  size_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    n += shards::shard_file_index(it->path().filename().string()).has_value();
  }
  return n;
}

// A directory without index.json after a crash inside the staging swap (swap_in_staged: the old index.json removed,
// the new dataset's shards renamed into place one by one, its index.json last) holds the new index in
// <dir>/.staging: what happened and what completes it (the same command rerun takes every shard from where it is, by
// plan hash, and writes the index); "" for any other directory.
std::string interrupted_swap_note(const std::string& dir) {
  const std::string staged_index = join_path(staging_dir(dir), "index.json");
  if (!path_exists(staged_index)) return "";
  std::string command;
  try {  // the command that was swapping it in, as its provenance records it
    command = json::parse(read_file(staged_index)).at("provenance").at("command_line").get<std::string>();
  } catch (const std::exception&) {
  }
  return strprintf("a cairn-reshard was interrupted while swapping a new dataset in (unless one is at it now: see "
                   ".reshard.lock there): the old index.json is gone, the new one waits in %s with %zu shard files not "
                   "moved into place yet; rerun the same command to complete it%s",
                   staging_dir(dir).c_str(), count_shard_files(staging_dir(dir)),
                   command.empty() ? "" : (" (it was: " + command + ")").c_str());
}

// Shards without an index anywhere: a run writing in place killed before its index, or an index removed by hand
// (which one, nothing on disk tells), so only a hint; "" without shards.
std::string shards_without_index_hint(const std::string& dir) {
  const size_t shards = count_shard_files(dir);
  if (shards == 0) return "";
  return strprintf("%zu shard files are here without it: if a cairn-reshard writing them was interrupted, the same "
                   "command rerun completes it",
                   shards);
}

// Checks one dataset (an existing directory); appends "where: what" problems (capped per shard so
// output stays readable). An index.json that is missing, unreadable, not JSON or of the wrong schema
// is a problem like a bad shard: the directory is not a valid dataset (exit 3).
json verify_dataset(const std::string& dir, std::vector<std::string>& problems, const ReshardFaults& faults) {
  const size_t cap_per_shard = 20;
  shards::Dataset ds;
  try {
    ds = shards::Dataset::open(dir);
  } catch (const Error& e) {
    // Where index.json is missing, what is known of why (a damaged one is what the error says).
    const bool missing = !path_exists(join_path(dir, "index.json"));
    const std::string swap = missing ? interrupted_swap_note(dir) : "";
    const std::string hint = missing && swap.empty() ? shards_without_index_hint(dir) : "";
    if (!swap.empty()) problems.push_back(dir + ": " + swap);
    else problems.push_back(hint.empty() ? e.what() : std::string(e.what()) + " (" + hint + ")");
    return {{"dataset", dir}, {"shards", 0}, {"tokens", 0}, {"documents", 0}};
  }
  if (!faults.verify_after_open.empty() && std::system(faults.verify_after_open.c_str()) != 0)
    throw RuntimeError("the test's --verify-after-open command failed: " + faults.verify_after_open);
  const json& ix = ds.index();
  const bool split = ix.value("split_docs", false);
  uint64_t tokens = 0, docs = 0, bytes = 0;
  bool unread = false;  // a shard could not be read: the totals are unknown
  std::set<std::string> listed;
  // Shards checked, by the tokens index.json lists (about 26 minutes per TB here: long enough to want an ETA).
  uint64_t listed_tokens = 0, checked_tokens = 0;
  for (size_t i = 0; i < ds.num_shards(); ++i) listed_tokens += ds.info(i).tokens;
  Progress progress("verifying " + dir, listed_tokens, "tokens");
  for (size_t i = 0; i < ds.num_shards(); ++i) {
    const auto& info = ds.info(i);
    const std::string which = strprintf("shard %zu of %zu", i, ds.num_shards());
    progress.update(checked_tokens, which);
    auto checked = [&, before = checked_tokens](uint64_t n) { progress.update(before + n, which); };
    checked_tokens += info.tokens;
    listed.insert(info.file);
    std::string where = join_path(dir, info.file);
    size_t before = problems.size();
    auto problem = [&](const std::string& what) {
      if (problems.size() - before < cap_per_shard) problems.push_back(where + ": " + what);
      else if (problems.size() - before == cap_per_shard) problems.push_back(where + ": ... (more problems not shown)");
    };
    std::unique_ptr<shards::Shard> sh;
    try {
      sh = shards::open_shard(where);
    } catch (const Error& e) {
      problems.push_back(where + ": " + e.what());
      unread = true;
      continue;
    }
    // A shard that opens but cannot be read to its end (an HDF5 read error) is one more problem.
    try {
      check_shard(*sh, ds, i, info, split, problem, tokens, docs, bytes, checked);
    } catch (const Error& e) {
      problem(e.what());
      unread = true;
    }
  }
  progress.finish(strprintf("%zu shards", ds.num_shards()));
  auto total = [&](const char* key, uint64_t have) {
    if (ix.contains(key) && ix[key].is_number_unsigned() && ix[key].get<uint64_t>() != have)
      problems.push_back(join_path(dir, "index.json") +
                         strprintf(": %s is %llu but the shards hold %llu", key,
                                   static_cast<unsigned long long>(ix[key].get<uint64_t>()),
                                   static_cast<unsigned long long>(have)));
  };
  if (!unread) {
    total("total_tokens", tokens);
    total("total_documents", docs);
    total("total_bytes", bytes);
  }
  for (auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.size() > 3 && n.compare(n.size() - 3, 3, ".h5") == 0 && n.rfind("shard_", 0) == 0 && !listed.count(n))
      problems.push_back(join_path(dir, n) + ": shard file not listed in index.json");
  }
  // The tokenizer files must still be the ones the dataset was built with.
  const json& tj = ix.value("tokenizer", json());
  if (tj.is_object() && tj.value("type", "") != "bytes") {
    try {
      tokenizer::load_from_description(tj, dir);
    } catch (const std::exception& e) {  // Error, or a description of the wrong shape (json's own errors)
      problems.push_back(join_path(dir, "tokenizer") + ": " + e.what());
    }
  }
  return {{"dataset", dir}, {"shards", ds.num_shards()}, {"tokens", tokens}, {"documents", docs}};
}

// Which version of index.json is in place: a writer replaces it by a rename (another inode) or removes it.
struct IndexVersion {
  bool present = false;
  dev_t dev = 0;
  ino_t ino = 0;
  int64_t mtime_ns = 0;
  off_t size = 0;
  bool operator==(const IndexVersion&) const = default;
};

IndexVersion index_version(const std::string& dir) {
  IndexVersion v;
  struct stat st {};
  if (::stat(join_path(dir, "index.json").c_str(), &st) != 0) return v;
  v.present = true;
  v.dev = st.st_dev;
  v.ino = st.st_ino;
  v.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  v.size = st.st_size;
  return v;
}

}  // namespace

int run_verify(const Config& cfg, const std::vector<std::string>& inputs, const std::string& json_out,
               const ReshardFaults& faults) {
  std::vector<std::string> dirs = inputs.empty() ? std::vector<std::string>{dataset_dir(cfg, "")} : inputs;
  if (mpi::initialized() && mpi::rank() != 0) return 0;
  // A path that is not there (or not a directory) names nothing to verify: a usage error (exit 2),
  // found before any dataset is read. Everything about an existing directory is verified (exit 3).
  for (const auto& d : dirs) {
    std::error_code ec;
    if (!fs::exists(d, ec))
      throw UsageError(
          file_message("cannot verify", d, "No such file or directory (verify takes dataset directories)"));
    if (!fs::is_directory(d, ec))
      throw UsageError(
          file_message("cannot verify", d, "not a directory (a dataset is the directory holding index.json)"));
  }
  // With --json - stdout carries only the JSON; the human report goes to stderr.
  FILE* human = json_out == "-" ? stderr : stdout;
  std::vector<std::string> problems;
  json checked = json::array();
  for (auto& d : dirs) {
    const size_t before = problems.size();
    // A cairn-reshard that swaps a new dataset in while this reads the old one makes either look damaged, or
    // passes one that is no longer there: neither is a finding about the dataset (exit 3), so when index.json
    // changed under the check it ends with exit 1 and nothing reported, to be run again.
    const IndexVersion was = index_version(d);
    json c = verify_dataset(d, problems, faults);
    if (!(index_version(d) == was))
      throw RuntimeError(file_message("cannot verify", d,
                                      "its index.json was replaced or removed while verify read it (a cairn-reshard "
                                      "writing it: see .reshard.lock there); verify it again once that run ends"));
    c["ok"] = problems.size() == before;
    checked.push_back(std::move(c));
  }
  for (auto& p : problems) std::fprintf(human, "%s\n", p.c_str());
  for (auto& c : checked)
    std::fprintf(human, "%s: %s (%llu shards, %llu documents, %llu tokens)\n", c["dataset"].get<std::string>().c_str(),
                 c["ok"].get<bool>() ? "OK" : "FAILED", static_cast<unsigned long long>(c["shards"].get<uint64_t>()),
                 static_cast<unsigned long long>(c["documents"].get<uint64_t>()),
                 static_cast<unsigned long long>(c["tokens"].get<uint64_t>()));
  std::fflush(human);
  if (!json_out.empty())
    write_json_output(json_out, json_text(json{{"datasets", checked},
                                               {"problems", problems},
                                               {"ok", problems.empty()},
                                               {"provenance", provenance().to_json()}},
                                          2) +
                                    "\n");
  if (!problems.empty()) throw GateFailure(strprintf("verify found %zu problem(s)", problems.size()));
  return 0;
}

int run_stats(const Config& cfg, const std::vector<std::string>& inputs, const std::string& json_out) {
  std::vector<std::string> dirs = inputs.empty() ? std::vector<std::string>{dataset_dir(cfg, "")} : inputs;
  if (mpi::initialized() && mpi::rank() != 0) return 0;
  // With --json - stdout carries only the JSON; the human summary goes to stderr.
  FILE* human = json_out == "-" ? stderr : stdout;
  json all = json::array();
  for (auto& d : dirs) {
    // stats rewrites stats.json: while a build, reshard or mix writes the dataset it is refused like them (a
    // stats.json of the dataset being replaced would land beside the new one's index).
    DirLock lock;
    std::error_code ec;
    // A dataset this user cannot write in (a shared, read-only copy) still gets its statistics printed; only
    // stats.json, and the lock that guards it, are left out (verify reads such datasets too).
    const bool writable = creatable_dir_problem(d).empty();
    // Only over a dataset: stats on any other directory fails below and must leave nothing in it.
    if (writable && fs::is_regular_file(join_path(d, "index.json"), ec))
      lock_dataset_dir(lock, d, /*every_rank=*/false);
    shards::Dataset ds = shards::Dataset::open(d);
    // Statistics of a corrupt dataset would describe data no reader will accept: its shards are
    // checked first, like reshard/convert do (exit 3 naming the shard; stats.json is left alone).
    check_dataset(ds, resolve_threads(read_section<DataSection>(cfg)));
    json s = compute_stats(ds);
    // A mixture's description (per-source counts, realised weights) cannot be recomputed from the
    // shards: it is kept from the stats.json `mix` wrote, else taken from index.json.
    try {
      const std::string old = join_path(d, "stats.json");
      json prev = path_exists(old) ? json::parse(read_file(old)) : json();
      if (prev.is_object() && prev.contains("mixture")) s["mixture"] = prev["mixture"];
      else if (ds.index().contains("mixture")) s["mixture"] = ds.index()["mixture"];
    } catch (const json::exception&) {
      if (ds.index().contains("mixture")) s["mixture"] = ds.index()["mixture"];
    }
    std::fprintf(human, "%s\n%s", d.c_str(), format_stats(s).c_str());
    std::fflush(human);
    if (writable) atomic_write(join_path(d, "stats.json"), json_text(s, 2) + "\n");
    else CAIRN_LOG_WARN("\"%s\" is not writable here: stats.json not updated", d.c_str());
    all.push_back(std::move(s));
  }
  // One dataset: its stats.json object; several: an array of them, in order (one JSON document).
  if (!json_out.empty()) write_json_output(json_out, json_text(all.size() == 1 ? all[0] : all, 2) + "\n");
  return 0;
}

}  // namespace cairn::reshard
