#!/usr/bin/env bash
# Sets up and runs every test that this machine can run: the CTest suite (CPU tests; GPU tests are
# compiled and reported Skipped without a device) and the Python suite (skips without torch).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/setup-deps.sh
if [ -d /usr/local/cuda/bin ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
BUILD=${BUILD:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j "$(nproc)"
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)"
# Python suite. With torch installed, build and install the normkit package against it first (the
# CUDA extension when torch has CUDA and nvcc is here; its GPU tests skip without a device). Without
# torch every Python test skips: pytest then exits 5, which is not a failure.
if python3 -c "import torch" 2>/dev/null; then
  python3 -c "import setuptools, wheel" 2>/dev/null || python3 -m pip install -q setuptools wheel
  MAX_JOBS=${MAX_JOBS:-$(nproc)} python3 -m pip install -q --no-build-isolation --no-deps .
fi
set +e
python3 -m pytest -q tests/python
rc=$?
set -e
if [ $rc -ne 0 ] && [ $rc -ne 5 ]; then exit $rc; fi
