#!/usr/bin/env python3
"""Writes unicode-heavy documents separated by "%" lines (deterministic): numbers of every length,
CJK, Cyrillic, Arabic, Devanagari, emoji (incl. ZWJ sequences and skin tones), combining marks, runs
of spaces/tabs/newlines/CRLF, contractions in every case, punctuation runs, code, URLs, long words
(the BPE heap path) and added tokens written in the text.

usage: make_unicode_text.py OUT.txt [DOCS]
Characters whose class differs between JavaScript's regex and PCRE2/Rust's (U+0085, U+FEFF, U+180E,
U+017F) are left out: the reference encoder is JavaScript, cairn follows PCRE2 (as Hugging Face's
Rust tokenizers do); see tests/reshard/tokenizer_unit_test.cpp for those.
"""
import random
import sys

out_path = sys.argv[1]
docs = int(sys.argv[2]) if len(sys.argv) > 2 else 400
rng = random.Random(20240601)
atoms = [
    "the", "The", " quick", " brown", "fox", "naïve", "café", "Straße", "déjà vu", "œuvre",
    "it's", "IT'S", "we're", "We'RE", "they've", "I'm", "you'll", "he'd", "don't", "'tis", "rock'n'roll",
    "0", "7", "42", "123", "2024", "31415926535", "1,000,000", "3.14159", "-17", "1e-9", "0x1F",
    "١٢٣", "४२", "Ⅻ", "½",
    "中文", "日本語のテキスト", "한국어", "汉字和标点。", "「引用」", "東京都",
    "Привет", "мир", "Ελληνικά", "עברית", "العربية", "हिन्दी", "ไทย",
    "😀", "🎉🎉", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "✓", "→", "∑", "©",
    "e\u0301", "a\u0308\u0323", "\u200d", "\u00a0", "\u2003", "\u3000",
    " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n", "\n ", "   \n\n  ",
    ",", ".", "...", "!!", "?!", "--", "—", "(", ")", "[x]", "{}", "\"", "'", "`", "$", "%", "#", "@", "&&", "_",
    "https://example.com/a?b=c", "foo_bar(baz);", "x += 1", "<div>", "</s>",
    "<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>", "<|",
]
long_words = ["a" * 300, "ab" * 700, "Pneumonoultramicroscopicsilicovolcanoconiosis" * 3, "=" * 500, "9" * 200,
              "é" * 150, "中" * 200, "😀" * 80, "\u00a0" * 70, " " * 300, "\n" * 80]
with open(out_path, "w", encoding="utf-8", newline="") as f:
    for d in range(docs):
        parts = [rng.choice(atoms) for _ in range(rng.randint(1, 60))]
        if d % 10 == 0:
            parts.insert(rng.randint(0, len(parts)), rng.choice(long_words))
        text = "".join(p if rng.random() < 0.5 else " " + p for p in parts)
        # A line that is exactly "%" would end the document early.
        lines = [l for l in text.split("\n") if l.rstrip("\r") != "%"]
        f.write("\n".join(lines) + "\n%\n")
