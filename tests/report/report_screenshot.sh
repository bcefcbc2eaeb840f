#!/usr/bin/env bash
# Opens a rendered report in headless Chromium and checks the screenshot is produced and not blank.
# The screenshot stays under the build directory (report-artifacts/) as a CI artifact.
# Exit 77 (ctest: skipped) when Chromium is not installed (scripts/install-deps.sh installs it).
set -euo pipefail
BIN=${CAIRN_BIN_DIR:-build/bin}
SRC=${CAIRN_SOURCE_DIR:-.}
ART=${CAIRN_BUILD_DIR:-build}/report-artifacts
PY=/usr/bin/python3
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
  echo "report_screenshot: chromium not installed; skipped" >&2
  exit 77
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$ART"
$PY "$SRC/tests/report/make_runs.py" "$T/base" --seed 1 --name base --steps 500
$PY "$SRC/tests/report/make_runs.py" "$T/cand" --seed 2 --name candidate --steps 500 --loss-shift 0.05 --tps-factor 0.95
"$BIN/cairn-report" "$T/cand" --baseline "$T/base" --out "$ART" --log-level warn \
  --set 'report.gates.val_loss={max_increase=0.02}' --set 'report.gates.wrong={max=0}' || [ $? -eq 3 ]
rm -f "$ART/report.png"
# No network, no GPU, a throwaway profile; timeout guards against a wedged browser.
timeout 180 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
  --user-data-dir="$T/profile" --screenshot="$ART/report.png" --window-size=1280,2000 \
  "file://$(cd "$ART/report" && pwd)/index.html" > "$T/chromium.log" 2>&1 || { cat "$T/chromium.log" >&2; exit 1; }
[ -s "$ART/report.png" ] || { echo "FAIL: no screenshot" >&2; cat "$T/chromium.log" >&2; exit 1; }
$PY "$SRC/tests/report/png_check.py" "$ART/report.png" --min-colors 100 --min-nonwhite 0.05
echo "report_screenshot: $ART/report.png"
