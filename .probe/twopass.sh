#!/usr/bin/env bash
# Probe: where two-pass with dX steps up at N = 128..248 (bf16), and whether fewer row slices avoid it.
set -u
xz -dc .prebuilt/normkit-bench.xz > /tmp/nb && chmod +x /tmp/nb
A=(--op ln_bwd,rms_bwd --dtype bf16 --commit d507891 --mode graph)
run() {  # name table-lines strategy
  printf "$2" > /tmp/$1.table
  NORMKIT_PLANNER_TABLE=/tmp/$1.table /tmp/nb --sweep --sweep-m 4096,4160,4224,4225,4288,4352,4608,5000,6144 --sweep-n 128 "${A[@]}" --strategy $3 --csv $OUT/$1-128.csv > /dev/null 2>&1
  NORMKIT_PLANNER_TABLE=/tmp/$1.table /tmp/nb --sweep --sweep-m 2048,2560,2816,3072,4096 --sweep-n 192,248 "${A[@]}" --strategy $3 --csv $OUT/$1-wide.csv > /dev/null 2>&1
}
run default "" two_pass,fused
run tb2 "two_pass_target_blocks_per_sm = 2\n" two_pass
run tb3 "two_pass_target_blocks_per_sm = 3\n" two_pass
cd $OUT && tar czf probe.tar.gz *.csv && rm *.csv
