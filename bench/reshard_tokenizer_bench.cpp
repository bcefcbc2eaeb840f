// Benchmark (prints figures, not a test): tokenizer throughput in MB/s with 1..N threads, cold by default.
// usage: cairn-reshard-bench-tokenizer TYPE FILES... [--vocab F --merges F | --tokenizer-json F]
//        [--threads 1,2,16] [--delimiter %] [--seconds 2 | --passes N] [--warm]
// Cold (default): every pass over a thread's share of the documents starts with an empty word cache.
// The bench loads the tokenizer twice and alternates between the two copies pass by pass; a tokenizer
// drops a thread's cache when that thread last used another tokenizer, so no pass reuses the words of
// the one before (as a build over fresh text would see). --warm keeps one copy: the figure then
// includes cache hits from earlier passes over the same text.
// Besides wall-clock MB/s, each line gives MB per second of the threads' own CPU time, which a busy
// shared machine distorts far less. Documents that are not valid UTF-8 are skipped and counted (cairn-reshard build
// refuses them).
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <time.h>

#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/tokenizer.h"

namespace {

struct Options {
  cairn::tokenizer::Spec spec;
  std::vector<std::string> files;
  std::vector<int> threads;
  std::string delimiter = "%";
  double seconds = 2.0;
  int passes = 0;  // > 0: exactly this many passes per thread instead of `seconds` (for perf stat)
  bool warm = false;
};

// Documents split at delimiter lines, as cairn-reshard build does; invalid UTF-8 ones are counted.
std::vector<std::string> read_documents(const Options& o, size_t& skipped) {
  std::vector<std::string> docs;
  skipped = 0;
  auto keep = [&](std::string& doc) {
    if (doc.empty()) return;
    if (cairn::tokenizer::find_invalid_utf8(doc) == std::string::npos) docs.push_back(doc);
    else ++skipped;
    doc.clear();
  };
  for (auto& f : o.files) {
    std::istringstream in(cairn::read_file(f));
    std::string line, doc;
    while (std::getline(in, line)) {
      if (line == o.delimiter) keep(doc);
      else doc += line + "\n";
    }
    keep(doc);
  }
  return docs;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// All threads encode their shares pass after pass until `seconds` have passed; returns bytes encoded
// and sets the wall time and the CPU time the threads used together.
uint64_t run_threads(const std::vector<const cairn::tokenizer::Tokenizer*>& toks, const std::vector<std::string>& docs,
                     int t, double seconds, int passes, double& elapsed, double& cpu) {
  std::vector<uint64_t> done(t, 0);
  std::vector<double> cpu_used(t, 0);
  std::barrier sync(t + 1);
  std::atomic<bool> stop{false};
  auto worker = [&](int id) {
    std::vector<uint32_t> ids;
    size_t which = 0;
    sync.arrive_and_wait();
    double c0 = thread_cpu_seconds();
    for (int p = 0; !stop && (passes == 0 || p < passes); ++p) {
      const auto* tok = toks[which++ % toks.size()];  // alternating copies: each pass starts cold
      for (size_t d = id; d < docs.size() && !stop; d += t) {
        ids.clear();
        tok->encode_into(docs[d], ids);
        done[id] += docs[d].size();
      }
    }
    cpu_used[id] = thread_cpu_seconds() - c0;
  };
  std::vector<std::thread> pool;
  for (int k = 0; k < t; ++k) pool.emplace_back(worker, k);
  sync.arrive_and_wait();
  auto t0 = std::chrono::steady_clock::now();
  if (passes == 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
  }
  for (auto& th : pool) th.join();
  elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t total = 0;
  cpu = 0;
  for (int k = 0; k < t; ++k) total += done[k], cpu += cpu_used[k];
  return total;
}

bool parse_args(int argc, char** argv, Options& o) {
  if (argc < 3) return false;
  o.spec.type = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--vocab") o.spec.vocab = next();
    else if (a == "--merges") o.spec.merges = next();
    else if (a == "--tokenizer-json") o.spec.tokenizer_json = next();
    else if (a == "--delimiter") o.delimiter = next();
    else if (a == "--seconds") o.seconds = std::atof(next().c_str());
    else if (a == "--warm") o.warm = true;
    else if (a == "--passes") o.passes = std::atoi(next().c_str());
    else if (a == "--threads") {
      std::stringstream ss(next());
      for (std::string t; std::getline(ss, t, ',');) o.threads.push_back(std::max(1, std::atoi(t.c_str())));
    } else o.files.push_back(a);
  }
  if (o.threads.empty()) o.threads = {1, static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
  return !o.files.empty();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cairn;
  Options o;
  if (!parse_args(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: %s bytes|gpt2|hf FILES... [--vocab F --merges F | --tokenizer-json F] "
                 "[--threads 1,2,4] [--delimiter %%] [--seconds S | --passes N] [--warm]\n",
                 argv[0]);
    return 2;
  }
  try {
    std::vector<std::unique_ptr<tokenizer::Tokenizer>> owned;
    owned.push_back(tokenizer::load(o.spec));
    if (!o.warm) owned.push_back(tokenizer::load(o.spec));
    std::vector<const tokenizer::Tokenizer*> toks;
    for (auto& t : owned) toks.push_back(t.get());
    size_t skipped = 0;
    std::vector<std::string> docs = read_documents(o, skipped);
    size_t bytes = 0;
    for (auto& d : docs) bytes += d.size();
    std::printf("tokenizer %s, %zu documents (%zu not UTF-8, skipped), %.2f MB per pass, %s, %u hardware threads\n",
                owned[0]->id().c_str(), docs.size(), skipped, bytes / 1e6,
                o.warm ? "warm (word cache kept across passes)" : "cold (empty word cache every pass)",
                std::thread::hardware_concurrency());
    for (int t : o.threads) {
      double elapsed = 0, cpu = 0;
      uint64_t total = run_threads(toks, docs, t, o.seconds, o.passes, elapsed, cpu);
      double mbs = total / 1e6 / elapsed;
      std::printf("threads %3d: %8.2f MB/s total, %7.2f MB/s per thread, %7.2f MB per CPU-second "
                  "(%.1f MB in %.2f s)\n",
                  t, mbs, mbs / t, total / 1e6 / std::max(cpu, 1e-9), total / 1e6, elapsed);
      std::fflush(stdout);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench: %s\n", e.what());
    return e.code();
  }
  return 0;
}
