#!/usr/bin/env bash
# Builds the GPU test and bench binaries for sm_90 on a machine without a GPU (nvcc is enough) and
# puts stripped, xz-compressed copies in one folder, for `PREBUILT=<folder> scripts/gpu-check.sh` on the GPU
# machine: the device then spends no time compiling.
#   scripts/prebuild.sh [out-folder (default .prebuilt)] [build-folder (default build-prebuilt)]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/.prebuilt}
BUILD=${2:-$ROOT/build-prebuilt}
command -v nvcc >/dev/null || { echo "prebuild: nvcc not found" >&2; exit 1; }
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" \
  -DNORMKIT_PTXAS_VERBOSE=ON > /dev/null
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" > "$BUILD/ptxas.log" 2>&1 || { tail -n 40 "$BUILD/ptxas.log"; exit 1; }
mkdir -p "$OUT"
# stripped and xz-compressed (gpu-check.sh unpacks them): the device tool carries at most 64 MiB
for bin in tests/normkit_gpu_tests tests/normkit_cpu_tests bench/normkit-bench; do
  name=$(basename "$bin")
  rm -f "$OUT/$name" "$OUT/$name.xz"  # only what this script writes: OUT may be any folder
  strip -o "$OUT/$name" "$BUILD/$bin"
  xz -T0 -6 "$OUT/$name"
done
# (info/exclude through git: in a worktree, scripts/prebuild-experiment.sh's, .git is a file)
EXCLUDE=$(git -C "$ROOT" rev-parse --path-format=absolute --git-path info/exclude 2>/dev/null || true)
if [ -n "$EXCLUDE" ] && ! grep -q '^/.prebuilt/' "$EXCLUDE" 2>/dev/null; then
  mkdir -p "$(dirname "$EXCLUDE")" && echo '/.prebuilt/' >> "$EXCLUDE"
fi
du -sh "$OUT"
