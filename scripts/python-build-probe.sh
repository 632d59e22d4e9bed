#!/usr/bin/env bash
# Builds the CPU-only extension (fast: no nvcc) in a few compiler configurations and runs the
# crash-prone Python checks against each, one fresh process per check: which build setting makes
# std::string-carrying calls (formatted errors, string results) crash? Prints a table; always exits 0.
set -u
PY=${PYTHON:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
echo "== environment"
"$PY" -c "import torch, sys; print('torch', torch.__version__, 'cxx11abi', torch._C._GLIBCXX_USE_CXX11_ABI, 'dlopenflags', sys.getdlopenflags())"
"$PY" -c "import sysconfig as s; print('sysconfig CXX:', s.get_config_var('CXX'), '| LDSHARED:', s.get_config_var('LDSHARED'))"
env | grep -E "^(CC|CXX|CFLAGS|CXXFLAGS|LDFLAGS|CPPFLAGS)=" | sed 's/^/env: /'
for c in c++ g++ /opt/gcc/bin/g++ /usr/bin/g++; do
  p=$(command -v "$c" 2>/dev/null) || continue
  echo "$c -> $(readlink -f "$p") : $("$p" --version 2>/dev/null | head -n 1)"
  file "$(readlink -f "$p")" 2>/dev/null | grep -q text && { echo "  (script)"; head -c 1500 "$(readlink -f "$p")" | sed 's/^/  | /'; }
done
echo | g++ -dM -E -x c++ -include string - 2>/dev/null | grep -E "_GLIBCXX_USE_CXX11_ABI|__cplusplus|_GLIBCXX_RELEASE" | sed 's/^/default g++: /'
probe() {  # name, env assignments...
  local name=$1; shift
  local dir=/tmp/normkit-probe-$name
  rm -rf "$dir" build
  if ! env "$@" NORMKIT_FORCE_CPU=1 MAX_JOBS=16 "$PY" -m pip install -q --no-build-isolation --no-deps --target "$dir" . > "/tmp/probe-$name.log" 2>&1; then
    echo "$name: BUILD FAILED"; tail -n 5 "/tmp/probe-$name.log"; return
  fi
  local res=""
  for src in "print(normkit.plan_backward('layer_norm', 64, 1024, torch.float16))" \
             "normkit.layer_norm(torch.randn(4, 16), (16,), torch.ones(15))"; do
    out=$(cd /tmp && PYTHONPATH="$dir" timeout 60 "$PY" -c "import torch, normkit
try:
    $src
except RuntimeError as e:
    print('raised')" 2>&1); rc=$?
    res="$res rc=$rc:$(echo "$out" | tail -n 1 | cut -c1-40)"
  done
  echo "$name:$res"
  [ "$name" = default ] && nm -D --undefined-only "$dir"/normkit/_C*.so | c++filt | grep -E "torchCheckFail|ConstantString" | head -4 | sed 's/^/  undefined: /'
}
echo "== probes (CPU-only builds)"
probe default
probe usr-bin-gxx CXX=/usr/bin/g++ CC=/usr/bin/gcc
probe abi1 NORMKIT_EXTRA_CXXFLAGS=-D_GLIBCXX_USE_CXX11_ABI=1
probe abi0 NORMKIT_EXTRA_CXXFLAGS=-D_GLIBCXX_USE_CXX11_ABI=0
probe cxx20 NORMKIT_EXTRA_CXXFLAGS=-std=c++20
exit 0
