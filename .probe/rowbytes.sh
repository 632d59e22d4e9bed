#!/usr/bin/env bash
# Probe for NOTES entry 66: fused_min_row_bytes 512 -> 256, with 32b85e7's prebuilt bench and a table override.
set -u
xz -dc .prebuilt/normkit-bench.xz > /tmp/nb && chmod +x /tmp/nb
printf 'fused_min_row_bytes = 256\n' > /tmp/new.table
COMMON=(--sweep --sweep-m 3072,4096,4608,5000,6144,8191 --op ln_bwd,rms_bwd --commit 32b85e7)
NORMKIT_PLANNER_TABLE=/tmp/new.table /tmp/nb "${COMMON[@]}" --sweep-n 128,192,248 --dtype bf16 --strategy two_pass,tiled,fused,auto --csv $OUT/new-16.csv > $OUT/new-16.log 2>&1
NORMKIT_PLANNER_TABLE=/tmp/new.table /tmp/nb "${COMMON[@]}" --sweep-n 64,96 --dtype f32 --strategy two_pass,tiled,fused,auto --csv $OUT/new-32.csv > $OUT/new-32.log 2>&1
/tmp/nb "${COMMON[@]}" --sweep-n 128,192,248 --dtype bf16 --strategy auto --csv $OUT/old-16.csv > /dev/null 2>&1
/tmp/nb "${COMMON[@]}" --sweep-n 64,96 --dtype f32 --strategy auto --csv $OUT/old-32.csv > /dev/null 2>&1
grep -h "graph |" $OUT/new-16.log $OUT/new-32.log
