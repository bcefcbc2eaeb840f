// Hugging Face tokenizer.json normalizers (NFC/NFD/NFKC/NFKD, Lowercase, Prepend, Replace, Strip, StripAccents) and the
// text edits of the Metaspace pre-tokenizer, applied to each piece of text between added tokens.
#include <utf8proc.h>

#include <cstdlib>
#include <cstring>

#include "cairn/error.h"
#include "cairn/log.h"
#include "internal.h"

namespace cairn::tokenizer::detail {

namespace {

bool all_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

// Unicode normalization through utf8proc (the table-driven forms of UAX #15). ASCII text is the same in
// every form, so it is returned untouched without a call.
void unicode_form(std::string_view in, NormStep::Kind kind, std::string& out) {
  if (all_ascii(in)) return void(out.assign(in));
  int opts = UTF8PROC_STABLE;
  switch (kind) {
    case NormStep::Kind::NFC: opts |= UTF8PROC_COMPOSE; break;
    case NormStep::Kind::NFD: opts |= UTF8PROC_DECOMPOSE; break;
    case NormStep::Kind::NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* res = nullptr;
  utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(in.data()), static_cast<utf8proc_ssize_t>(in.size()), &res,
                   static_cast<utf8proc_option_t>(opts));
  if (n < 0) throw UsageError(strprintf("Unicode normalization failed: %s", utf8proc_errmsg(n)));
  out.assign(reinterpret_cast<const char*>(res), static_cast<size_t>(n));
  std::free(res);
}

// Hugging Face lowercases code point by code point with Rust's char::to_lowercase: the simple mapping of
// UnicodeData.txt plus SpecialCasing.txt's one unconditional lowercase expansion (U+0130 -> "i\u0307");
// no context rules (a final capital sigma becomes σ, not ς).
void lowercase(std::string_view in, std::string& out) {
  out.clear();
  out.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    auto c = static_cast<unsigned char>(in[i]);
    if (c < 0x80) {
      out.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : static_cast<char>(c));
      ++i;
      continue;
    }
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t len = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(in.data() + i),
                                            static_cast<utf8proc_ssize_t>(in.size() - i), &cp);
    if (len <= 0) throw UsageError("text is not valid UTF-8 (lowercase)");
    i += static_cast<size_t>(len);
    if (cp == 0x130) {
      out.append("i\xCC\x87");
      continue;
    }
    utf8proc_uint8_t buf[4];
    utf8proc_ssize_t w = utf8proc_encode_char(utf8proc_tolower(cp), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(w));
  }
}

// Every non-overlapping occurrence of `from`, left to right, becomes `to`.
void replace_string(std::string_view in, const std::string& from, const std::string& to, std::string& out) {
  out.clear();
  size_t pos = 0;
  for (size_t hit; (hit = in.find(from, pos)) != std::string_view::npos; pos = hit + from.size())
    out.append(in.substr(pos, hit - pos)).append(to);
  out.append(in.substr(pos));
}

// Every regex match becomes `to`; an empty match inserts `to` and steps one code point.
void replace_regex(std::string_view in, const RegexSplitter& re, const std::string& to, std::string& out) {
  out.clear();
  size_t pos = 0, copied = 0, b = 0, e = 0;
  while (pos <= in.size() && regex_find(re, in, pos, b, e)) {
    out.append(in.substr(copied, b - copied)).append(to);
    copied = e;
    if (e > b) {
      pos = e;
      continue;
    }
    if (b >= in.size()) break;
    size_t step = 1;
    while (b + step < in.size() && (static_cast<unsigned char>(in[b + step]) & 0xC0) == 0x80) ++step;
    pos = b + step;
  }
  out.append(in.substr(copied));
}

// Hugging Face's StripAccents: every mark (General_Category M: Mn, Mc, Me) removed, as after NFD.
void strip_accents(std::string_view in, std::string& out) {
  out.clear();
  out.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    if (static_cast<unsigned char>(in[i]) < 0x80) {
      out.push_back(in[i++]);
      continue;
    }
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t len = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(in.data() + i),
                                            static_cast<utf8proc_ssize_t>(in.size() - i), &cp);
    if (len <= 0) throw UsageError("text is not valid UTF-8 (StripAccents)");
    const utf8proc_category_t cat = utf8proc_category(cp);
    if (cat != UTF8PROC_CATEGORY_MN && cat != UTF8PROC_CATEGORY_MC && cat != UTF8PROC_CATEGORY_ME)
      out.append(in.substr(i, static_cast<size_t>(len)));
    i += static_cast<size_t>(len);
  }
}

// Hugging Face's Strip: Unicode White_Space off the ends that are asked for.
void strip(std::string_view in, bool left, bool right, std::string& out) {
  size_t b = 0, e = in.size();
  if (left)
    while (size_t w = white_space_at(in, b)) b += w;
  if (right)
    while (size_t w = white_space_before(in, e, b)) e -= w;
  out.assign(in.substr(b, e - b));
}

void apply_step(const NormStep& s, std::string_view in, bool first_piece, std::string& out) {
  using K = NormStep::Kind;
  switch (s.kind) {
    case K::NFC:
    case K::NFD:
    case K::NFKC:
    case K::NFKD: return unicode_form(in, s.kind, out);
    case K::Lowercase: return lowercase(in, out);
    case K::Prepend:
      out.clear();
      if (!in.empty()) out.append(s.a);
      return void(out.append(in));
    case K::MetaspacePrepend: {
      // Metaspace: prepended unless the text already starts with the replacement; scheme "first" only
      // for the piece at the start of the document (after an added token there is none).
      bool add = !in.empty() && in.substr(0, s.a.size()) != s.a && (!s.first_only || first_piece);
      out.clear();
      if (add) out.append(s.a);
      return void(out.append(in));
    }
    case K::Replace: return replace_string(in, s.a, s.b, out);
    case K::ReplaceRegex: return replace_regex(in, *s.re, s.b, out);
    case K::Strip: return strip(in, s.first_only, s.last_only, out);
    case K::StripAccents: return strip_accents(in, out);
  }
}

}  // namespace

void normalize(const std::vector<NormStep>& steps, std::string_view text, bool first_piece, std::string& out) {
  thread_local std::string tmp;
  out.assign(text);
  for (const NormStep& s : steps) {
    apply_step(s, out, first_piece, tmp);
    out.swap(tmp);
  }
}

}  // namespace cairn::tokenizer::detail
