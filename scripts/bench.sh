#!/usr/bin/env bash
# Sets up, builds and runs normkit's main job: the seed benchmark suite (normkit-bench --suite seed).
# On a machine without a GPU it times the CPU reference path and says so. Extra arguments go to
# normkit-bench (e.g. --suite llm, --sweep --quick, --md FILE).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/setup-deps.sh
if [ -d /usr/local/cuda/bin ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
BUILD=${BUILD:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j "$(nproc)" --target normkit-bench
if [ $# -eq 0 ]; then set -- --suite seed; fi
"$BUILD/bench/normkit-bench" "$@"
