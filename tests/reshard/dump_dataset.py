#!/usr/bin/env python3
"""Prints a cairn dataset's documents, one line of token ids each (read with h5py, independently of cairn).

usage: dump_dataset.py DATASET [--no-eot]   (--no-eot drops each document's final end-of-text id)
"""
import json
import os
import sys

import h5py
import numpy as np


def documents(dataset):
    with open(os.path.join(dataset, "index.json")) as f:
        index = json.load(f)
    for shard in index["shards"]:
        with h5py.File(os.path.join(dataset, shard["file"]), "r") as h:
            tokens = np.asarray(h["tokens"][:])
            offsets = np.asarray(h["doc_offsets"][:])
            assert h.attrs["num_tokens"] == len(tokens)
            for d in range(len(offsets) - 1):
                yield tokens[offsets[d]:offsets[d + 1]]


def main():
    dataset = sys.argv[1]
    no_eot = "--no-eot" in sys.argv
    out = sys.stdout
    for doc in documents(dataset):
        if no_eot:
            doc = doc[:-1]
        out.write(" ".join(map(str, doc.tolist())) + "\n")


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # a reader such as `cmp -s` stopped early
        sys.stderr.close()
        sys.exit(0)
