#!/usr/bin/env bash
# Keeps one reader of a checkpoint's DONE marker (records::read_checkpoint_done): no other code names the file or
# parses a CheckpointDone itself, so every tool agrees on which markers count and names a malformed one alike.
# checkpoint.cpp, which writes the marker (seal) and tests its presence (is_sealed), names it by kCheckpointDoneFile.
exec bash "$(dirname "$0")/../keep_out.sh" '"DONE"|CheckpointDone::from_json' \
  '^libcommon/(src/records/rows\.cpp|include/cairn/records\.h):' \
  "DONE markers read outside records::read_checkpoint_done (use it, or records::kCheckpointDoneFile):" \
  "one reader of DONE: records::read_checkpoint_done"
