#!/usr/bin/env bash
# Verification for NOTES entry 67: the rule on two-pass's dX grid (two_pass_dx_max_grid_percent), built in.
set -u
xz -dc .prebuilt/normkit-bench.xz > /tmp/nb && chmod +x /tmp/nb
printf 'two_pass_dx_max_grid_percent = 0\n' > /tmp/off.table
A=(--sweep --op ln_bwd,rms_bwd --commit COMMIT --mode graph)
G1=(--sweep-m 1024,1100,1536,2048,2200,2560,3072 --sweep-n 136,192,256,320,384,512,640)
G2=(--sweep-m 4160,4225,4608,5000 --sweep-n 128)
G3=(--sweep-m 1100,2200,3072 --sweep-n 256,512)
/tmp/nb "${A[@]}" "${G1[@]}" --dtype bf16 --strategy two_pass,tiled,fused,auto --csv $OUT/new-g1.csv > $OUT/new-g1.log 2>&1
/tmp/nb "${A[@]}" "${G2[@]}" --dtype bf16 --strategy two_pass,tiled,fused,auto --csv $OUT/new-g2.csv > /dev/null 2>&1
/tmp/nb "${A[@]}" "${G3[@]}" --dtype f16 --strategy two_pass,tiled,fused,auto --csv $OUT/new-g3.csv > /dev/null 2>&1
NORMKIT_PLANNER_TABLE=/tmp/off.table /tmp/nb "${A[@]}" "${G1[@]}" --dtype bf16 --strategy auto --csv $OUT/off-g1.csv > /dev/null 2>&1
NORMKIT_PLANNER_TABLE=/tmp/off.table /tmp/nb "${A[@]}" "${G2[@]}" --dtype bf16 --strategy auto --csv $OUT/off-g2.csv > /dev/null 2>&1
NORMKIT_PLANNER_TABLE=/tmp/off.table /tmp/nb "${A[@]}" "${G3[@]}" --dtype f16 --strategy auto --csv $OUT/off-g3.csv > /dev/null 2>&1
grep "graph |" $OUT/new-g1.log
cd $OUT && tar czf probe.tar.gz *.csv *.log && rm *.csv *.log
