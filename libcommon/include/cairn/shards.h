// Reader (and writer) of cairn token shards: HDF5 files + index.json (see docs/shard-format.md).
// CONTRACT used by cairn-train/cairn-eval; implemented by the cairn-reshard work (libcommon/src/shards*.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cairn::shards {

struct ShardInfo {
  std::string file;       // file name relative to the dataset directory
  uint64_t tokens = 0;
  uint64_t documents = 0;
  uint64_t xxh64 = 0;     // xxHash64 of the token bytes as stored
};

// One open shard: random access to token ranges and documents.
class Shard {
 public:
  virtual ~Shard() = default;
  virtual uint64_t num_tokens() const = 0;
  virtual uint64_t num_documents() const = 0;
  // Tokens [offset, offset+count) widened to uint32.
  virtual void read_tokens(uint64_t offset, uint64_t count, uint32_t* out) const = 0;
  std::vector<uint32_t> tokens(uint64_t offset, uint64_t count) const;
  // Document d: token range [begin, end) (end-of-text included) and its source UTF-8 byte length.
  virtual uint64_t doc_begin(uint64_t d) const = 0;
  virtual uint64_t doc_end(uint64_t d) const = 0;
  virtual uint32_t doc_bytes(uint64_t d) const = 0;
  std::vector<uint32_t> document(uint64_t d) const;
};

// A dataset directory (index.json + shard files).
class Dataset {
 public:
  // Opens and checks index.json; throws UsageError naming the path if missing or malformed.
  static Dataset open(const std::string& dir);
  const std::string& dir() const { return dir_; }
  const nlohmann::json& index() const { return index_; }
  size_t num_shards() const { return shards_.size(); }
  const ShardInfo& info(size_t i) const { return shards_[i]; }
  uint64_t total_tokens() const;
  uint32_t vocab_size() const;      // tokenizer vocabulary (max id + 1)
  uint32_t eot_id() const;          // end-of-text token id
  std::string tokenizer_id() const;
  std::unique_ptr<Shard> shard(size_t i) const;  // opens shard file i

 private:
  std::string dir_;
  nlohmann::json index_;
  std::vector<ShardInfo> shards_;
};

}  // namespace cairn::shards
