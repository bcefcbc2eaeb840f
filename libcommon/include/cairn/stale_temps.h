// Temp files a killed writer left: atomic_write, AtomicFile and ShardWriter name them .<file>.tmp.<host>.<pid>.<hex>.
#pragma once

#include <functional>
#include <string>

namespace cairn {

// The name a writer of `path` writes under before it renames over it: ".<file>.tmp.<host>.<pid>.<hex>" beside it
// (<host>: this host's short name reduced to [a-z0-9-], 32 characters at most; <hex>: random, or a counter). While
// the object lives the name is this process's own, so this process's remove_stale_temps keeps its file.
class TempName {
 public:
  explicit TempName(const std::string& path);
  ~TempName();
  TempName(const TempName&) = delete;
  TempName& operator=(const TempName&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The <host> of this host's temp names.
const std::string& temp_host_tag();

// Removes from `dir` the temp files of the files whose names `wanted` accepts whose writer is gone. Returns how
// many went. Writers that replace files without a dataset directory's lock (cairn-reshard convert, cairn-eval's
// results) call it before they write, so repeated kills do not pile up full-size copies.
//
// Only temps of this host are judged (a pid says nothing about another node's processes on a shared Lustre/NFS
// directory): another host's temps are left alone, whatever their pid. Temps named without a host (by earlier
// versions: .<file>.tmp.<pid>.<hex>) count as this host's. One of this host's temps goes when
//  - no process has its pid; or
//  - its pid is this process's and the temp is not one this process is writing (a TempName alive): a job in a
//    fresh pid namespace (a Slurm job in a container) often gets the very pid of the killed writer; or
//  - the process that has its pid now started after the temp was last modified (more than 5 s after: mtime's
//    granularity, /proc/stat's whole-second boot time, an NFS server's clock a little off this node's): a writer
//    modifies its temp only while it runs, so that process is another that reuses the pid. Linux only (the start
//    time from /proc/<pid>/stat and /proc/stat): where /proc cannot be read, a temp whose pid runs is kept.
// A temp of a process still writing is kept. A hard-link temp (atomic_link_or_write) has its target's mtime, so a
// sweep by another process in the moment between its link and rename may remove it: that writer then writes a copy.
// Limits: the temps of a writer killed on another node (a job requeued onto other nodes) stay until a sweep on that
// node; a writer in another pid namespace on this host (two containers sharing a directory) is judged by this
// namespace's pids, as another host's would be without the host in the name; a host name longer than 32 characters
// or differing only in the characters dropped counts as the same host.
//
// StaleTempScope::Locked is for a sweep by the holder of the directory's lock before its run writes there
// (cairn-reshard under .reshard.lock, when flock held it): no other run can be writing, so every temp but this
// process's own live ones is a killed writer's, whatever host wrote it. A job requeued onto other nodes then still
// removes what its killed predecessor left (a multi-node reshard's partial shards are full-size).
enum class StaleTempScope { ThisHost, Locked };
size_t remove_stale_temps(const std::string& dir, const std::function<bool(const std::string& name)>& wanted,
                          StaleTempScope scope = StaleTempScope::ThisHost);

}  // namespace cairn
