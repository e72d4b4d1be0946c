#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over one small launch of each shape:
# single CTA per row, split rows (incl. the whole-row rescue), prefill windows, the tie scan.
#   bash tools/sanitize.sh <aot-dir> <log-dir> [dtype]     (dtype: float32, bfloat16, float16)
set -u
aot=${1:-.aot}; logs=${2:-.}; dtype=${3:-float32}
tag=$([ "$dtype" = float32 ] && echo "" || echo "_$dtype")
status=0
for tool in memcheck racecheck synccheck; do
  log="$logs/sanitize${tag}_$tool.log"
  # (host API errors left out: torch probes driver entry points the driver may not have,
  # cuGetProcAddress errors that are no kernel's; a failed launch still fails the check)
  compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 86 \
    python3 tools/device_streaming.py --aot "$aot" --sanitize --seed 7 --dtype "$dtype" > "$log" 2>&1
  rc=$?
  echo "$tool $dtype: rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)"
  [ $rc -eq 0 ] || status=1
done
exit $status
