#!/usr/bin/env bash
# Keeps config reads typed: outside libcommon's config machinery, no code looks a key up by its dotted name
# (cfg.get_int("train.steps") ...); tools read their section structs (read_section<TrainSection>(cfg)).
exec bash "$(dirname "$0")/../keep_out.sh" \
  '(\.|->)(get_int|get_float|get_string|get_bool|get_ints|get_strings|get_floats|get|has)\("[a-z_]+\.[a-z_]+"' \
  '^libcommon/src/config\.cpp:' \
  "config keys read by string (use the section struct from cairn/sections/*.h and read_section):" \
  "no string reads of config keys outside libcommon/src/config.cpp"
