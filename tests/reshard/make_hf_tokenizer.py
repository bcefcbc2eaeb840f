#!/usr/bin/env python3
"""Builds a Hugging Face tokenizer.json (BPE, ByteLevel) from GPT-2's encoder.json + vocab.bpe.

usage: make_hf_tokenizer.py encoder.json vocab.bpe OUT.json [--llama3-split | --o200k-split] [--array-merges]
--o200k-split uses GPT-4o's pre-tokenizer regex (o200k_base, as Hugging Face conversions ship it).
"""
import json
import sys

enc_path, bpe_path, out_path = sys.argv[1:4]
with open(enc_path, encoding="utf-8") as f:
    vocab = json.load(f)
with open(bpe_path, encoding="utf-8") as f:
    merges = [l for l in f.read().split("\n")[1:] if l]
if "--array-merges" in sys.argv:
    merges = [m.split(" ") for m in merges]
eot = vocab["<|endoftext|>"]
O200K = ("[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
split = LLAMA3 if "--llama3-split" in sys.argv else O200K if "--o200k-split" in sys.argv else None
if split:
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": split}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
else:
    pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
tok = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": True, "special": True}],
    "normalizer": None,
    "pre_tokenizer": pre,
    "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
              "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges},
}
with open(out_path, "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False)
