#!/usr/bin/env bash
# Benchmark (prints figures; not a test): start-up time of every tool, `cairn-<tool> --version`, against
# /bin/true in the same run. Each command runs N times (default 20), round-robin so that all of them
# see the same machine load; prints the median wall time, the median over /bin/true, the median CPU
# time (user + sys) and the shared libraries the binary loads (ldd).
# usage: bench/startup_bench.sh [BUILD_DIR] [N]      (env: TOOLS="plan report ..." to choose)
#        MAX_MS=50 bench/startup_bench.sh BUILD_DIR  also exits 3 when cairn-plan or cairn-report takes
#                                                    MAX_MS or more over /bin/true (the issue's bar)
set -euo pipefail
BUILD="${1:-build}"
N="${2:-20}"
TOOLS="${TOOLS:-plan report reshard sweep train eval}"
cmds=(/bin/true)
for t in $TOOLS; do
  b="$BUILD/bin/cairn-$t"
  if [ -x "$b" ]; then cmds+=("$b"); else echo "skip: $b not built" >&2; fi
done
echo "start-up of --version, median of $N runs (round-robin), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$N" "${MAX_MS:-}" "${cmds[@]}" <<'PY'
import os, statistics, subprocess, sys, time

n, max_ms, cmds = int(sys.argv[1]), sys.argv[2], sys.argv[3:]


def run(exe):
    argv = [exe] if exe == "/bin/true" else [exe, "--version"]
    # posix_spawn (vfork-like in glibc): the parent's size adds nothing to the child's start-up.
    t0 = time.perf_counter()
    pid = os.posix_spawn(exe, argv, os.environ, file_actions=[
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0), (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
    _, status, ru = os.wait4(pid, 0)
    wall = (time.perf_counter() - t0) * 1e3
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(argv)} failed (exit {os.waitstatus_to_exitcode(status)})")
    return wall, (ru.ru_utime + ru.ru_stime) * 1e3


for exe in cmds:  # warm the page cache
    run(exe)
walls = {c: [] for c in cmds}
cpus = {c: [] for c in cmds}
for _ in range(n):
    for c in cmds:
        w, u = run(c)
        walls[c].append(w)
        cpus[c].append(u)
base = statistics.median(walls["/bin/true"])


def libs(exe):
    try:
        out = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    except OSError:
        return ""
    names = [l.split()[0] for l in out.splitlines() if "=>" in l]
    return f"{len(names):3d} libs" + ("" if exe == "/bin/true" else "  " + " ".join(
        n.split(".so")[0] for n in names if not n.startswith(("libc.", "libm.", "libgcc_s", "libstdc++", "libpthread"))))


print(f"{'command':<28} {'wall ms':>8} {'over true':>9} {'cpu ms':>7}  shared libraries")
worst = 0.0
for c in cmds:
    w = statistics.median(walls[c])
    name = "/bin/true" if c == "/bin/true" else os.path.basename(c) + " --version"
    print(f"{name:<28} {w:8.1f} {w - base:9.1f} {statistics.median(cpus[c]):7.1f}  {libs(c)}")
    if os.path.basename(c) in ("cairn-plan", "cairn-report"):
        worst = max(worst, w - base)
if max_ms:
    ok = worst < float(max_ms)
    print(f"cairn-plan/cairn-report: at most {worst:.1f} ms over /bin/true, bar {max_ms} ms: {'ok' if ok else 'MISSED'}")
    sys.exit(0 if ok else 3)
PY
