#!/usr/bin/env python3
"""Writes a variant of a real tokenizer.json with other normalizers / pre-tokenizers, so the loader's
supported components are each checked against the JavaScript reference on a real vocabulary.

usage: make_tokenizer_variant.py IN.json OUT.json VARIANT
  metaspace-first   SentencePiece file: no normalizer, Metaspace(prepend_scheme first, split false)
                    (how Mistral v0.3 and newer Llama conversions ship it)
  metaspace-split   SentencePiece file: no normalizer, Metaspace(prepend_scheme always, split true)
  nfkc-sp           SentencePiece file: Sequence[NFKC, Prepend, Replace] (Unicode forms before the rest)
  nfd-sp            SentencePiece file: Sequence[NFD, Prepend, Replace]
  lowercase-sp      SentencePiece file: Sequence[Lowercase, Prepend, Replace] (text without a capital sigma: the
                    JavaScript port lowercases a final one to ς, Rust's char::to_lowercase and cairn to σ)
  regex-sp          SentencePiece file: Replace(Regex " {2,}" -> " ") before Prepend/Replace
  nfc-bytelevel     byte-level file: NFC normalizer (as Qwen2 ships it)
  digits-bytelevel  byte-level file: Digits(individual_digits) before its pre-tokenizer (ASCII digits only:
                    the JavaScript port's \\d is ASCII, Rust's char::is_numeric and cairn's \\p{N} are not)
  nfkd-bytelevel    byte-level file: NFKD normalizer
  strip-sp          SentencePiece file: added tokens </s> with lstrip, <s> with rstrip (white space beside them
                    goes with the token)
  strip-bytelevel   byte-level file: <|begin_of_text|> with lstrip and rstrip, <|eot_id|> rstrip, <|end_of_text|>
                    lstrip
  whitespace-sp     SentencePiece file: no normalizer, Whitespace pre-tokenizer (\w+|[^\w\s]+, white space dropped;
                    how Hugging Face's quicktour trains a BPE)
  accents-sp        SentencePiece file: Sequence[NFD, StripAccents, Lowercase], WhitespaceSplit pre-tokenizer
  normstrip-sp      SentencePiece file: Sequence[Strip(left only), Prepend, Replace]
  falcon-bytelevel  byte-level file with Falcon's pre-tokenizer: Sequence[Punctuation(Contiguous), ByteLevel,
                    Digits(runs), Split("[0-9][0-9][0-9]")]
  punct-bytelevel   byte-level file: Sequence[Punctuation (Isolated), ByteLevel without its regex]
  word-bytelevel    byte-level file: Sequence[Split("\\w+|\\W", Isolated), ByteLevel] (Oniguruma's \\w: letters, marks,
                    numbers, connector punctuation)
  bloom-bytelevel   byte-level file with BLOOM's pre-tokenizer: Sequence[Split(" ?[^(\\s|[.,!?…。，、।۔،])]+",
                    Isolated), ByteLevel without its regex]
  single-word-sp, single-word-bytelevel
                    added tokens <mask> (single_word), ask> (plain, inside <mask>) and <m> (single_word, lstrip,
                    rstrip) after the file's own, matched in the raw text (normalized false)
"""
import json
import sys

in_path, out_path, variant = sys.argv[1:4]
with open(in_path, encoding="utf-8") as f:
    tok = json.load(f)
SP = [{"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]


def seq(*steps):
    return {"type": "Sequence", "normalizers": list(steps)}


if variant == "metaspace-first":
    tok["normalizer"] = None
    tok["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False,
                          "add_prefix_space": True}
elif variant == "metaspace-split":
    tok["normalizer"] = None
    tok["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True,
                          "add_prefix_space": True}
elif variant == "nfkc-sp":
    tok["normalizer"] = seq({"type": "NFKC"}, *SP)
elif variant == "nfd-sp":
    tok["normalizer"] = seq({"type": "NFD"}, *SP)
elif variant == "lowercase-sp":
    tok["normalizer"] = seq({"type": "Lowercase"}, *SP)
elif variant == "regex-sp":
    tok["normalizer"] = seq({"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}, *SP)
elif variant in ("nfc-bytelevel", "nfkd-bytelevel", "digits-bytelevel"):
    if variant != "digits-bytelevel":
        tok["normalizer"] = {"type": "NFC" if variant == "nfc-bytelevel" else "NFKD"}
    else:
        tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, tok["pre_tokenizer"]]}
    # Added tokens are matched in the raw text (normalized=false), the form cairn reproduces.
    for t in tok.get("added_tokens", []):
        t["normalized"] = False
elif variant in ("strip-sp", "strip-bytelevel"):
    flags = ({"</s>": ("lstrip",), "<s>": ("rstrip",)} if variant == "strip-sp" else
             {"<|begin_of_text|>": ("lstrip", "rstrip"), "<|eot_id|>": ("rstrip",), "<|end_of_text|>": ("lstrip",)})
    for t in tok.get("added_tokens", []):
        for flag in flags.get(t["content"], ()):
            t[flag] = True
elif variant == "whitespace-sp":
    tok["normalizer"] = None
    tok["pre_tokenizer"] = {"type": "Whitespace"}
elif variant == "accents-sp":
    tok["normalizer"] = seq({"type": "NFD"}, {"type": "StripAccents"}, {"type": "Lowercase"})
    tok["pre_tokenizer"] = {"type": "WhitespaceSplit"}
elif variant == "normstrip-sp":
    tok["normalizer"] = seq({"type": "Strip", "strip_left": True, "strip_right": False}, *SP)
elif variant in ("falcon-bytelevel", "punct-bytelevel", "bloom-bytelevel", "word-bytelevel"):
    if variant == "word-bytelevel":
        pre = [{"type": "Split", "pattern": {"Regex": "\\w+|\\W"}, "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]
    elif variant == "bloom-bytelevel":
        pre = [{"type": "Split", "pattern": {"Regex": " ?[^(\\s|[.,!?…。，、।۔،])]+"},
                "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]
    elif variant == "falcon-bytelevel":
        pre = [{"type": "Punctuation", "behavior": "Contiguous"},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
               {"type": "Digits", "individual_digits": False},
               {"type": "Split", "pattern": {"Regex": "[0-9][0-9][0-9]"}, "behavior": "Isolated", "invert": False}]
    else:
        pre = [{"type": "Punctuation", "behavior": "Isolated"},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]
    tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": pre}
elif variant in ("single-word-sp", "single-word-bytelevel"):
    next_id = max([len(tok["model"]["vocab"])] + [t["id"] + 1 for t in tok.get("added_tokens", [])])
    for i, (content, flags) in enumerate([("<mask>", ("single_word",)), ("ask>", ()),
                                          ("<m>", ("single_word", "lstrip", "rstrip"))]):
        t = {"id": next_id + i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
        for flag in flags:
            t[flag] = True
        tok["added_tokens"].append(t)
else:
    sys.exit(f"unknown variant {variant}")
with open(out_path, "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False)
