// A check made after the config loaded, named with where its key was set, as the loader names its own errors.
#pragma once
#include <string>

#include "cairn/config.h"
#include "cairn/error.h"

namespace cairn {

// `e` (a value's check made after loading: a size's text, a gate's metric, a task table's kind) prefixed with where
// `dotted` was set ("exp.toml:12:1", "env CAIRN_...", "--set ..."); unchanged for a default or a tool flag, which
// the message names already.
UsageError with_origin(const Config& cfg, const std::string& dotted, const UsageError& e);

}  // namespace cairn
