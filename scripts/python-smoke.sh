#!/usr/bin/env bash
# Each check in a fresh Python process with faulthandler on, so that a crash names its check and
# the ones after it still run. For chasing a crash of the installed normkit package (gpu-check's
# `pysmoke` stage); prints one PASS/FAIL line per check.
set -u
PY=${PYTHON:-python3}
check() {  # name, python source
  local name=$1 src=$2 out
  if out=$(timeout 120 "$PY" -X faulthandler -c "$src" 2>&1); then
    echo "PASS  $name: $(echo "$out" | tail -n 1)"
  else
    echo "FAIL  $name (rc $?):"; echo "$out" | grep -v "^  File .*/_pytest/\|pluggy" | tail -n 25 | sed 's/^/      /'
  fi
}
PRE="import torch, normkit"
check "plan query, no CUDA work yet" "$PRE; print(normkit.plan_backward('layer_norm', 64, 1024, torch.float16))"
check "strategy query, no CUDA work yet" "$PRE; print(normkit.strategy_supported('layer_norm', 64, 300000, torch.bfloat16, strategy='fused'))"
check "plan query after a CUDA op" "$PRE; x = torch.randn(4, 16, device='cuda'); normkit.layer_norm(x, (16,)); torch.cuda.synchronize(); print(normkit.plan_backward('layer_norm', 64, 1024, torch.float16))"
check "plan query after torch.cuda.init" "$PRE; torch.cuda.init(); print(normkit.plan_backward('layer_norm', 64, 1024, torch.float16))"
check "bad weight shape on CPU raises" "$PRE
try:
    normkit.layer_norm(torch.randn(4, 16), (16,), torch.ones(15))
except RuntimeError as e:
    print('raised:', str(e)[:80])"
check "bad weight shape on CUDA raises" "$PRE
x = torch.randn(4, 16, device='cuda')
try:
    normkit.layer_norm(x, (16,), torch.ones(15, device='cuda'))
except RuntimeError as e:
    print('raised:', str(e)[:80])"
check "bad strategy name raises (library error)" "$PRE
try:
    normkit.plan_backward('layer_norm', 4, 4, torch.float16, strategy='fastest')
except RuntimeError as e:
    print('raised:', str(e)[:80])"
echo "compiler: $(${CXX:-c++} --version 2>/dev/null | head -n 1)"
SO=$("$PY" -c "import normkit._C as c; print(c.__file__)" 2>/dev/null)
[ -n "$SO" ] && ldd "$SO" | grep -E "stdc\+\+|cudart|libc10|gcc_s" | sed 's/^/ldd: /'
exit 0
