// Test fixture: a real cairn dataset built with the shards writer from /usr/share/games/fortunes text
// (bytes tokenizer: ids 0..255 plus end-of-text 256), split into a chosen number of shards.
#pragma once
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cairn/files.h"
#include "cairn/shards.h"

namespace cairn::test {

inline std::vector<std::vector<uint32_t>> fortune_documents(size_t max_docs = 100000) {
  std::vector<std::vector<uint32_t>> docs;
  for (const char* f : {"/usr/share/games/fortunes/fortunes", "/usr/share/games/fortunes/computers",
                        "/usr/share/games/fortunes/science"}) {
    std::ifstream in(f);
    std::string line, cur;
    auto flush = [&] {
      if (!cur.empty() && docs.size() < max_docs) {
        std::vector<uint32_t> d(cur.begin(), cur.end());
        for (auto& x : d) x &= 0xff;
        d.push_back(256);
        docs.push_back(std::move(d));
      }
      cur.clear();
    };
    while (std::getline(in, line)) {
      if (line == "%") flush();
      else cur += line + "\n";
    }
    flush();
  }
  return docs;
}

// Writes `num_shards` shards of the documents (whole documents, round-robin by size) + index.json.
// `poison` replaces token 0 of the last shard with that id when nonzero (bad-input tests).
inline void make_dataset(const std::string& dir, int num_shards, size_t max_docs = 100000, uint32_t poison = 0) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto docs = fortune_documents(max_docs);
  std::vector<std::vector<size_t>> assign(num_shards);
  for (size_t d = 0; d < docs.size(); ++d) assign[d % num_shards].push_back(d);
  nlohmann::json list = nlohmann::json::array();
  uint64_t total = 0;
  for (int s = 0; s < num_shards; ++s) {
    uint64_t ntok = 0;
    for (size_t d : assign[s]) ntok += docs[d].size();
    shards::ShardMeta meta;
    meta.shard_index = s;
    meta.shard_count = num_shards;
    meta.tokenizer_id = "bytes";
    meta.vocab_size = poison && s == num_shards - 1 ? poison + 1 : 257;  // the writer checks ids
    meta.eot_id = 256;
    std::string name = shards::shard_file_name(s);
    shards::ShardWriter w(join_path(dir, name), meta, ntok, assign[s].size());
    bool first = true;
    for (size_t d : assign[s]) {
      auto doc = docs[d];
      if (first && poison && s == num_shards - 1) doc[0] = poison;
      first = false;
      w.append_tokens(doc.data(), doc.size());
      w.append_document(doc.size(), static_cast<uint32_t>(doc.size() - 1));
    }
    shards::ShardInfo info = w.finish();
    list.push_back({{"file", name}, {"tokens", info.tokens}, {"documents", info.documents},
                    {"xxh64", shards::hex64(info.xxh64)}});
    total += info.tokens;
  }
  nlohmann::json index = {{"format", "cairn-shards"}, {"format_version", shards::kFormatVersion},
                          {"tokenizer", "bytes"}, {"vocab_size", 257}, {"eot_id", 256},
                          {"token_dtype", "uint16"}, {"seed", nullptr}, {"total_tokens", total},
                          {"shards", list}};
  atomic_write(join_path(dir, "index.json"), index.dump(2) + "\n");
}

}  // namespace cairn::test
