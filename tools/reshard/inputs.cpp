// Reading build inputs: text files (delimiter-split or whole), JSONL, gzip, stdin and directories.
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "reshard.h"

namespace cairn::reshard {

namespace fs = std::filesystem;

namespace {

bool looks_binary(const fs::path& p) {
  FILE* f = std::fopen(p.c_str(), "rb");
  if (!f) return false;
  char buf[8192];
  size_t n = std::fread(buf, 1, sizeof buf, f);
  std::fclose(f);
  if (n >= 2 && static_cast<unsigned char>(buf[0]) == 0x1f && static_cast<unsigned char>(buf[1]) == 0x8b)
    return false;  // gzip
  return std::find(buf, buf + n, '\0') != buf + n;
}

}  // namespace

// Expands directories (recursively, sorted) and removes duplicates by real path.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  auto add = [&](const fs::path& p) {
    std::error_code ec;
    std::string canon = fs::weakly_canonical(p, ec).string();
    if (!seen.insert(ec ? p.string() : canon).second) return;
    out.push_back(p.string());
  };
  for (const auto& in : inputs) {
    if (in == "-") {
      out.push_back(in);
      continue;
    }
    std::error_code ec;
    if (!fs::exists(in, ec)) throw UsageError(file_message("cannot open input", in, "No such file or directory"));
    if (fs::is_directory(in, ec)) {
      std::vector<fs::path> files;
      for (auto it = fs::recursive_directory_iterator(in, ec); it != fs::recursive_directory_iterator(); ++it) {
        const auto name = it->path().filename().string();
        if (!name.empty() && name[0] == '.') {
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file()) files.push_back(it->path());
      }
      std::sort(files.begin(), files.end());
      for (auto& f : files) {
        // Binary files (e.g. fortune's .dat indexes) are not text documents.
        if (looks_binary(f)) {
          CAIRN_LOG_DEBUG("skipping binary file %s", f.c_str());
          continue;
        }
        add(f);
      }
    } else {
      add(in);
    }
  }
  if (out.empty()) throw UsageError("no input files (give files, directories or - for stdin)");
  return out;
}

namespace {

std::string gunzip(const std::string& data, const std::string& name) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw RuntimeError("zlib init failed");
  std::string out;
  out.resize(std::max<size_t>(data.size() * 4, 1 << 16));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  size_t produced = 0;
  for (;;) {
    if (produced == out.size()) out.resize(out.size() * 2);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - produced, 1u << 30));
    int rc = inflate(&zs, Z_NO_FLUSH);
    produced = reinterpret_cast<char*>(zs.next_out) - out.data();
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      inflateReset(&zs);  // concatenated gzip members
      continue;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      size_t at = zs.total_in;
      inflateEnd(&zs);
      throw UsageError(file_message("corrupt gzip input", name, strprintf("at compressed byte %zu", at)));
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      inflateEnd(&zs);
      throw UsageError(file_message("truncated gzip input", name, "ends inside the stream"));
    }
  }
  inflateEnd(&zs);
  out.resize(produced);
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TextCorpus read_text_inputs(const Config& cfg, const std::vector<std::string>& inputs) {
  return read_text_files(cfg, expand_inputs(inputs));
}

TextCorpus read_text_files(const Config& cfg, const std::vector<std::string>& files) {
  TextCorpus c;
  c.files = files;
  const std::string format = cfg.get_string("data.format");
  const std::string delimiter = cfg.get_string("data.delimiter");
  const std::string field = cfg.get_string("data.jsonl_field");
  const bool skip_bad = cfg.get_bool("data.skip_bad");

  for (uint32_t fi = 0; fi < c.files.size(); ++fi) {
    const std::string& name = c.files[fi];
    std::string shown = name == "-" ? "<stdin>" : name;
    auto data = std::make_unique<std::string>(read_file(name));
    if (data->size() >= 2 && static_cast<unsigned char>((*data)[0]) == 0x1f &&
        static_cast<unsigned char>((*data)[1]) == 0x8b)
      *data = gunzip(*data, shown);
    c.bytes += data->size();
    std::string base = ends_with(name, ".gz") ? name.substr(0, name.size() - 3) : name;
    bool jsonl = format == "jsonl" || (format == "auto" && (ends_with(base, ".jsonl") || ends_with(base, ".ndjson")));
    std::string_view all(*data);

    auto bad = [&](uint64_t line, size_t offset, const std::string& why) {
      std::string where = strprintf("%s:%llu", shown.c_str(), static_cast<unsigned long long>(line));
      if (!skip_bad)
        throw UsageError(strprintf("bad input %s (byte offset %zu): %s (use --skip-bad to skip such records)",
                                   where.c_str(), offset, why.c_str()));
      ++c.skipped;
      CAIRN_LOG_DEBUG("skipping %s: %s", where.c_str(), why.c_str());
    };
    auto push = [&](std::string_view text, uint64_t line, size_t offset) {
      if (text.empty()) return;
      size_t badpos = tokenizer::find_invalid_utf8(text);
      if (badpos != std::string_view::npos) {
        // Report the line of the bad byte, not of the document start.
        uint64_t l = line + std::count(text.begin(), text.begin() + badpos, '\n');
        return bad(l, offset + badpos, "invalid UTF-8");
      }
      if (text.size() > UINT32_MAX) return bad(line, offset, "document longer than 4 GiB");
      c.docs.push_back({text, fi, line});
    };

    uint64_t line = 1;
    size_t pos = 0;
    if (jsonl) {
      while (pos < all.size()) {
        size_t nl = all.find('\n', pos);
        size_t end = nl == std::string_view::npos ? all.size() : nl;
        std::string_view l = all.substr(pos, end - pos);
        if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
        if (l.find_first_not_of(" \t") != std::string_view::npos) {
          json j;
          bool ok = true;
          std::string why;
          try {
            j = json::parse(l);
          } catch (const json::parse_error& e) {
            ok = false;
            why = strprintf("broken JSON line (%s)", e.what());
          }
          if (ok && (!j.is_object() || !j.contains(field) || !j[field].is_string())) {
            ok = false;
            why = "no string field \"" + field + "\"";
          }
          if (!ok) {
            bad(line, pos, why);
          } else {
            auto text = std::make_unique<std::string>(j[field].get<std::string>());
            std::string_view v(*text);
            size_t before = c.docs.size();
            push(v, line, pos);
            if (c.docs.size() > before) c.storage.push_back(std::move(text));
          }
        }
        ++line;
        if (nl == std::string_view::npos) break;
        pos = nl + 1;
      }
    } else if (delimiter.empty()) {
      push(all, 1, 0);
    } else {
      size_t doc_begin = 0;
      uint64_t doc_line = 1;
      while (pos < all.size()) {
        size_t nl = all.find('\n', pos);
        size_t end = nl == std::string_view::npos ? all.size() : nl;
        std::string_view l = all.substr(pos, end - pos);
        if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
        size_t next = nl == std::string_view::npos ? all.size() : nl + 1;
        if (l == delimiter) {
          push(all.substr(doc_begin, pos - doc_begin), doc_line, doc_begin);
          doc_begin = next;
          doc_line = line + 1;
        }
        ++line;
        pos = next;
      }
      push(all.substr(doc_begin), doc_line, doc_begin);
    }
    c.storage.push_back(std::move(data));
  }
  return c;
}

}  // namespace cairn::reshard
