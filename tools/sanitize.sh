#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over one small launch of each shape:
# single CTA per row, split rows (incl. the whole-row rescue), prefill windows, the tie scan.
#   bash tools/sanitize.sh <aot-dir> <log-dir>
set -u
aot=${1:-.aot}; logs=${2:-.}
status=0
for tool in memcheck racecheck synccheck; do
  compute-sanitizer --tool "$tool" --error-exitcode 86 \
    python3 tools/device_streaming.py --aot "$aot" --sanitize --seed 7 > "$logs/sanitize_$tool.log" 2>&1
  rc=$?
  echo "$tool: rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$logs/sanitize_$tool.log" | tail -1)"
  [ $rc -eq 0 ] || status=1
done
exit $status
