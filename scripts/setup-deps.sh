#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build and test normkit: a C++ compiler, CMake >= 3.25,
# Ninja, GoogleTest, Python's pytest. The CUDA toolkit (nvcc) is used when present (it is on our
# build machines at /usr/local/cuda); without it the build is CPU-only.
set -eu
if [ -d /usr/local/cuda/bin ] && ! command -v nvcc >/dev/null 2>&1; then export PATH=/usr/local/cuda/bin:$PATH; fi
need=()
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v ninja >/dev/null 2>&1 || need+=(ninja-build)
command -v git >/dev/null 2>&1 || need+=(git)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev libgmock-dev)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
python3 -c "import pytest" 2>/dev/null || python3 -m pip install -q pytest
