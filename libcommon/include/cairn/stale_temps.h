// Temp files a killed writer left: atomic_write and AtomicFile name them .<file>.tmp.<pid>.<hex> beside the file.
#pragma once

#include <functional>
#include <string>

namespace cairn {

// Removes from `dir` the temp files of the files whose names `wanted` accepts, when the process that wrote them is
// no longer running on this host (a live writer's temps are left alone). Returns how many went. Writers that
// replace files without a dataset directory's lock (cairn-reshard convert, cairn-eval's results) call it before
// they write, so repeated kills do not pile up full-size copies.
size_t remove_stale_temps(const std::string& dir, const std::function<bool(const std::string& name)>& wanted);

}  // namespace cairn
