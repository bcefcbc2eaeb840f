#!/usr/bin/env python3
"""llm.c token files for the cairn-reshard tests, written and checked by llm.c's own rules, independently of cairn.

The rules are those of karpathy/llm.c: dev/data/data_common.py write_datafile (256 x int32 header: magic,
version, token count, zeros; then the tokens as uint16 for "gpt-2", magic 20240520 version 1, or as uint32
for "llama-3", magic 20240801 version 7) and dev/data/fineweb.py (end-of-text *before* each document; shards
of a fixed token count, a document that does not fit continues in the next file; names
<name>_val_000000.bin, <name>_train_000001.bin, ...).

usage:
  llmc_files.py expect DATASET LLMC_DIR MODEL [DOCS_DATASET]
      LLMC_DIR's shard_%06d.bin must be, byte for byte, what write_datafile writes for DATASET's shards
      with end-of-text moved before each document (documents taken from DOCS_DATASET, default DATASET,
      so a --split-docs dataset is checked against the documents it was cut from).
  llmc_files.py fineweb DATASET OUT_DIR MODEL SHARD_SIZE [DELIMITER]
      writes DATASET's documents as llm.c's fineweb.py does; prints the files and the boundaries that
      fall inside a document. DELIMITER: the id put before each document instead of the dataset's
      end-of-text (fineweb.py's tokenize_llama puts Llama 3's <|begin_of_text|>, 128000).
  llmc_files.py widetok OUT.json
      a byte-level BPE tokenizer.json with a Llama-3-sized vocabulary (128256 ids): merged tokens have
      ids above 65535, end-of-text <|end_of_text|> is 128001.
  llmc_files.py maxid DATASET
      prints the largest token id in DATASET's documents apart from their end-of-text.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dump_dataset import documents  # noqa: E402

HEADERS_INFO = {
    "gpt-2": {"magic": 20240520, "version": 1, "token_dtype": np.uint16},
    "llama-3": {"magic": 20240801, "version": 7, "token_dtype": np.uint32},
}


def datafile_bytes(toks, model_desc):
    """The bytes llm.c's write_datafile writes for `toks`."""
    assert len(toks) < 2**31, "token count too large"
    info = HEADERS_INFO[model_desc]
    toks = np.asarray(toks, dtype=np.int64)
    limit = 2**16 if info["token_dtype"] == np.uint16 else 2**32
    assert (toks >= 0).all() and (toks < limit).all(), f"token dictionary too large for {info['token_dtype'].__name__}"
    header = np.zeros(256, dtype=np.int32)
    header[0] = info["magic"]
    header[1] = info["version"]
    header[2] = len(toks)
    return header.tobytes() + toks.astype(info["token_dtype"]).tobytes()


def index(dataset):
    with open(os.path.join(dataset, "index.json")) as f:
        return json.load(f)


def llmc_stream(dataset, start=None):
    """The dataset's documents with end-of-text (or START) before each one instead of end-of-text after it."""
    eot = index(dataset)["eot_id"]
    parts = []
    for doc in documents(dataset):
        assert doc[-1] == eot, "a cairn document must end with end-of-text"
        parts.append(np.concatenate([[eot if start is None else start], doc[:-1]]).astype(np.int64))
    return np.concatenate(parts)


def expect(dataset, llmc_dir, model, docs_dataset=None, start=None):
    """START: the id before each document (fineweb.py's tokenize_llama: <|begin_of_text|>), else end-of-text."""
    ix = index(dataset)
    stream = llmc_stream(docs_dataset or dataset, int(start) if start else None)
    assert len(stream) == ix["total_tokens"], (len(stream), ix["total_tokens"])
    names = sorted(n for n in os.listdir(llmc_dir) if n.endswith(".bin"))
    assert names == [f"shard_{i:06d}.bin" for i in range(len(ix["shards"]))], names
    off = 0
    for name, shard in zip(names, ix["shards"]):
        n = shard["tokens"]
        want = datafile_bytes(stream[off:off + n], model)
        got = open(os.path.join(llmc_dir, name), "rb").read()
        if got != want:
            diff = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
            sys.exit(f"FAIL: {name} differs from llm.c's write_datafile ({model}) at byte {diff} "
                     f"(sizes {len(got)} vs {len(want)})")
        off += n
    assert off == len(stream)
    print(f"ok: {len(names)} files byte-identical to write_datafile({model}), "
          f"{'end-of-text' if not start else start} before each document")


def fineweb(dataset, out_dir, model, shard_size, delimiter=None):
    """fineweb.py's sharding loop over the dataset's documents (end-of-text, or DELIMITER, first)."""
    eot = index(dataset)["eot_id"] if delimiter is None else delimiter
    os.makedirs(out_dir, exist_ok=True)
    buf, shard_index, inside = [], 0, []

    def write(toks):
        split = "val" if shard_index == 0 else "train"
        path = os.path.join(out_dir, f"fineweb_{split}_{shard_index:06d}.bin")
        with open(path, "wb") as f:
            f.write(datafile_bytes(toks, model))
        print(path)

    for doc in documents(dataset):
        tokens = [eot] + doc[:-1].tolist()
        if len(buf) + len(tokens) < shard_size:
            buf += tokens
        else:
            remainder = shard_size - len(buf)
            write(buf + tokens[:remainder])
            if 0 < remainder < len(tokens):
                inside.append(shard_index)
            shard_index += 1
            buf = tokens[remainder:]
    if buf:
        write(buf)
    print("boundaries inside a document after shard:", " ".join(map(str, inside)))


def widetok(out_path):
    # GPT-2's byte <-> unicode table (the ByteLevel alphabet).
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_char = {b: chr(c) for b, c in zip(bs, cs)}
    vocab = {byte_char[b]: b for b in range(256)}
    merges, merged = [], []
    words = ["the", "and", "you", "that", "is", "of", "to", "in", "it", "for", "be", "are", "not", "with", "have",
             "this", "as", "on", "he", "was", "all", "but", "what", "they", "can", "his", "one", "love", "never"]
    for w in words:
        for piece in (w, " " + w):
            chars = [byte_char[b] for b in piece.encode()]
            cur = chars[0]
            for c in chars[1:]:
                new = cur + c
                if new not in vocab and new not in merged:
                    merged.append(new)
                    merges.append(f"{cur} {c}")
                cur = new
    step = (128000 - 70001) // len(merged)  # spread the merged ids over 70001..127999
    for k, t in enumerate(merged):
        vocab[t] = 70001 + k * step
    assert 65535 < max(vocab.values()) < 128000, max(vocab.values())
    added = [(128000, "<|begin_of_text|>"), (128001, "<|end_of_text|>"), (128009, "<|eot_id|>"),
             (128255, "<|reserved_special_token_250|>")]
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, c in added],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": merges},
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "expect":
        expect(*args)
    elif cmd == "fineweb":
        fineweb(args[0], args[1], args[2], int(args[3]), int(args[4]) if len(args) > 4 else None)
    elif cmd == "widetok":
        widetok(args[0])
    elif cmd == "maxid":
        print(max(int(d[:-1].max()) for d in documents(args[0]) if len(d) > 1))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
