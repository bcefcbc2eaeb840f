// Benchmark (prints figures, not a test): tokenizer throughput in MB/s with 1..N threads.
// usage: cairn-reshard-bench-tokenizer TYPE FILES... [--vocab F --merges F | --tokenizer-json F]
//        [--threads 1,2,16] [--delimiter %] [--seconds 2]
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/tokenizer.h"

int main(int argc, char** argv) {
  using namespace cairn;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s bytes|gpt2|hf FILES... [--vocab F --merges F | --tokenizer-json F] "
                         "[--threads 1,2,4] [--delimiter %%] [--seconds S]\n", argv[0]);
    return 2;
  }
  tokenizer::Spec spec;
  spec.type = argv[1];
  std::vector<std::string> files;
  std::vector<int> threads;
  std::string delimiter = "%";
  double seconds = 2.0;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--vocab") spec.vocab = next();
    else if (a == "--merges") spec.merges = next();
    else if (a == "--tokenizer-json") spec.tokenizer_json = next();
    else if (a == "--delimiter") delimiter = next();
    else if (a == "--seconds") seconds = std::atof(next().c_str());
    else if (a == "--threads") {
      std::stringstream ss(next());
      for (std::string t; std::getline(ss, t, ',');) threads.push_back(std::atoi(t.c_str()));
    } else files.push_back(a);
  }
  if (threads.empty()) threads = {1, static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
  try {
    auto tok = tokenizer::load(spec);
    // Documents split at delimiter lines, as cairn-reshard build does.
    std::vector<std::string> docs;
    size_t bytes = 0;
    for (auto& f : files) {
      std::istringstream in(read_file(f));
      std::string line, doc;
      while (std::getline(in, line)) {
        if (line == delimiter) {
          if (!doc.empty()) docs.push_back(doc);
          doc.clear();
        } else {
          doc += line + "\n";
        }
      }
      if (!doc.empty()) docs.push_back(doc);
    }
    for (auto& d : docs) bytes += d.size();
    std::printf("tokenizer %s, %zu documents, %.2f MB per pass, %u hardware threads\n", tok->id().c_str(), docs.size(),
                bytes / 1e6, std::thread::hardware_concurrency());
    for (int t : threads) {
      // Each thread warms its word cache with one pass over its share (as a long build would),
      // then all threads encode their shares repeatedly until `seconds` have passed.
      std::vector<uint64_t> done(t, 0);
      std::barrier sync(t + 1);
      std::atomic<bool> stop{false};
      auto worker = [&](int id) {
        std::vector<uint32_t> ids;
        auto pass = [&]() {
          uint64_t b = 0;
          for (size_t d = id; d < docs.size() && !stop; d += t) {
            ids.clear();
            tok->encode_into(docs[d], ids);
            b += docs[d].size();
          }
          return b;
        };
        pass();
        sync.arrive_and_wait();
        while (!stop) done[id] += pass();
      };
      std::vector<std::thread> pool;
      for (int k = 0; k < t; ++k) pool.emplace_back(worker, k);
      sync.arrive_and_wait();
      auto t0 = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
      stop = true;
      for (auto& th : pool) th.join();
      double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      uint64_t total = 0;
      for (auto b : done) total += b;
      double mbs = total / 1e6 / elapsed;
      std::printf("threads %3d: %8.2f MB/s total, %7.2f MB/s per thread (%.1f MB in %.2f s)\n", t, mbs, mbs / t,
                  total / 1e6, elapsed);
      std::fflush(stdout);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench: %s\n", e.what());
    return e.code();
  }
  return 0;
}
