#!/usr/bin/env bash
# Probe: the dX kernel's small-grid layout (more, smaller blocks) up to a grid of one block per SM.
set -u
xz -dc .prebuilt/normkit-bench.xz > /tmp/nb && chmod +x /tmp/nb
G=(--sweep --sweep-m 64,255,1024,2048,2560,3072,4097,4224,4608,5000 --sweep-n 64,128,192,248,768,1024 --op ln_bwd,rms_bwd --dtype bf16 --commit d507891 --mode graph)
run() {  # name table-lines strategies
  printf "$2" > /tmp/$1.table
  NORMKIT_PLANNER_TABLE=/tmp/$1.table /tmp/nb "${G[@]}" --strategy $3 --csv $OUT/$1-grid.csv > $OUT/$1-grid.log 2>&1
  NORMKIT_PLANNER_TABLE=/tmp/$1.table /tmp/nb --suite seed --mode graph --commit d507891 --strategy auto --csv $OUT/$1-seed.csv > /dev/null 2>&1
}
run default "" two_pass,tiled,fused,auto
run sg133 "small_grid_blocks = 133\n" two_pass,tiled,auto
run sg133t128 "small_grid_blocks = 133\nsmall_grid_block_threads = 128\n" two_pass,tiled,auto
cd $OUT && tar czf probe.tar.gz *.csv *.log && rm *.csv *.log
