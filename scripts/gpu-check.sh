#!/usr/bin/env bash
# normkit's one GPU check: build for sm_90, run the whole CTest suite (GPU tests included), build and
# test the Python package, and run the benchmarks -- in ONE call on the GPU machine. Full logs go
# under $OUT (packed into $OUT/gpu-check.tar.gz, since only a few files come back); a short
# summary is printed last.
#
#   scripts/gpu-check.sh [stage ...]     stages: build ctest python bench (= seed llm) llm-unstaged sweep profile
#                                        profile-wide profile-peers pyprobe pysmoke peers e2e host tables tune
#                                        ab racecheck ceiling clocks
#                                        (default: build ctest python bench)
#
# Environment: OUT (log folder, default ./gpu-check-out), JOBS (build parallelism, default nproc),
# CUDA_ARCH (default 90), PREBUILT (a folder holding normkit_gpu_tests, normkit_cpu_tests and
# normkit-bench built elsewhere for sm_90, e.g. by scripts/prebuild.sh on a machine without a GPU:
# the build stage is then skipped and the test binaries are run directly instead of through CTest,
# which saves the device time of the build). GTEST_FILTER reaches the test binaries as usual:
# GTEST_FILTER='-Huge.*2Pow31*' leaves out the M*N > 2^31 cases (on an H100 at aef7118:
# Huge.MoreThan2Pow31Elements 77 s, Huge.ShortAndWideRowsMoreThan2Pow31Elements 74 s, the rest of the
# GPU suite 110 s), for re-runs after changes that cannot touch 64-bit indexing; the summary then says that tests were filtered out.
#
# Stage `tables`: the same benchmark once per planner table, to A/B a threshold or launch shape
# without a rebuild. PROBE_TABLES = "name:key=value,key=value;name2:..." ("name:" alone = the
# built-in table); PROBE_ARGS = the normkit-bench arguments (default: the llm suite in graph mode).
# Each run writes results/probe-<name>.md and .json; the summary names them.
#
# Stage `racecheck`: compute-sanitizer's shared-memory hazard check on the GPU tests that
# RACECHECK_FILTER names (a gtest filter; default: three staged-row cases, where lanes read the
# statistics their warp's first lane staged, docs/NOTES.md entry 48; 23 s of tests on the H200 at
# 639a0ad); RACECHECK_FILTER='WideRows/*' checks the fused wide walk of fp32 weights (tail first, entry 89)
# on few rows. The whole suite takes far longer under the sanitizer than one device call allows (one
# every-strategy SplitRows case of 300 x 131072 did not finish in 280 s, entry 89).
#
# Stage `ab`: two builds of normkit-bench on the same cases, alternating base, new, base, new, ...
# (AB_ROUNDS rounds, default 2) in this one call, then bench/compare_ab.py -> results/ab.md (each
# run's time, new / base, and whether the runs' ranges overlap). BASE_PREBUILT = a folder holding
# the base normkit-bench (plain or .xz, e.g. scripts/prebuild.sh run at the base commit into
# .prebuilt-base); the new one is PREBUILT's (or this build's). AB_ARGS = the normkit-bench arguments
# (default: the seed suite in graph mode).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/gpu-check-out}
# Work in a staging folder; only the summary and one archive go to $OUT (few files come back).
WORK=$ROOT/gpu-check-work
rm -rf "$WORK"
LOGS=$WORK/logs
RESULTS=$WORK/results
mkdir -p "$LOGS" "$RESULTS" "$OUT"
JOBS=${JOBS:-$(nproc)}
CUDA_ARCH=${CUDA_ARCH:-90}
BUILD=$ROOT/build-gpu
PREBUILT=${PREBUILT:-}
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(build ctest python bench)
# Prints the folder holding a prebuilt folder's binaries unpacked: prebuild.sh ships them
# xz-compressed (the device tool carries at most 64 MiB), unpacked here into the staging folder DEST.
unpack_prebuilt() {  # FOLDER DEST
  local folder f
  folder=$(cd "$1" && pwd) || return 1
  if ls "$folder"/*.xz >/dev/null 2>&1; then
    mkdir -p "$2"
    for f in "$folder"/*.xz; do xz -dc "$f" > "$2/$(basename "$f" .xz)" && chmod +x "$2/$(basename "$f" .xz)"; done
    folder=$2
  fi
  echo "$folder"
}
if [ -n "$PREBUILT" ]; then
  PREBUILT=$(unpack_prebuilt "$PREBUILT" "$WORK/prebuilt")
  STAGES=("${STAGES[@]/build}")
fi
# The GPU machine gets a copy of the work tree without .git: pass COMMIT=<sha> there.
if [ -z "${COMMIT:-}" ]; then
  COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then COMMIT="$COMMIT+dirty"; fi
fi
SUMMARY=$WORK/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
has_stage() { local s; for s in "${STAGES[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
run_stage() {  # name, command...: runs with its log, records pass/fail and seconds
  local name=$1; shift
  local start=$SECONDS
  echo "=== $name: $*" >&2
  if "$@" > "$LOGS/$name.log" 2>&1; then
    say "PASS  $name ($((SECONDS - start)) s)"
  else
    say "FAIL  $name ($((SECONDS - start)) s): see logs/$name.log"; tail -n 40 "$LOGS/$name.log" >&2
  fi
  pack
}
pack() {  # after every stage: a run cut short by its time limit still returns what it finished
  cp "$SUMMARY" "$OUT/summary.txt"
  tar -C "$WORK" -czf "$OUT/gpu-check.tar.gz" summary.txt logs results 2>/dev/null
}

say "normkit gpu-check  commit=$COMMIT  date=$(date -u +%Y-%m-%dT%H:%MZ)  stages=${STAGES[*]}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /' | tee -a "$SUMMARY"

if has_stage build; then
  run_stage build bash -c "cmake -S . -B '$BUILD' -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH -DNORMKIT_PTXAS_VERBOSE=ON && cmake --build '$BUILD' -j $JOBS"
  grep -E "spill stores" "$LOGS/build.log" | grep -v " 0 bytes spill stores" | sort | uniq -c > "$LOGS/spills.txt" || true
fi
if has_stage ctest && [ -n "$PREBUILT" ]; then
  run_stage cpu-tests "$PREBUILT/normkit_cpu_tests"
  grep -E "\[  PASSED  \]|\[  FAILED  \]|\[  SKIPPED \]" "$LOGS/cpu-tests.log" | head -20 | sed 's/^/  cpu: /' | tee -a "$SUMMARY"
  run_stage gpu-tests "$PREBUILT/normkit_gpu_tests"
  grep -E "\[  PASSED  \]|\[  FAILED  \]|\[  SKIPPED \]" "$LOGS/gpu-tests.log" | head -20 | sed 's/^/  gpu: /' | tee -a "$SUMMARY"
  if [ -n "${GTEST_FILTER:-}" ]; then echo "  gpu: NOT THE WHOLE SUITE: GTEST_FILTER=$GTEST_FILTER" | tee -a "$SUMMARY"; fi
elif has_stage ctest; then
  run_stage ctest ctest --test-dir "$BUILD" --output-on-failure -j 4 --timeout 1500
  grep -E "tests passed|tests failed|Skipped|\[  PASSED  \]|\[  FAILED  \]|\[  SKIPPED \]" "$LOGS/ctest.log" | head -20 | sed 's/^/  /' | tee -a "$SUMMARY"
fi
if has_stage python; then
  MAX_JOBS=$JOBS run_stage pip python3 -m pip install --no-build-isolation --no-deps -v .
  grep -E "^ *normkit: " "$LOGS/pip.log" | sort -u | sed 's/^ */  /' | tee -a "$SUMMARY"
  SO=$(cd /tmp && python3 -c "import normkit._C as c; print(c.__file__)" 2>/dev/null)
  [ -n "$SO" ] && say "  extension links: $(ldd "$SO" | grep -oE 'lib(stdc\+\+|c10|torch_cpu)[^ ]*' | tr '\n' ' ')"
  # A crash here is the wrong-libstdc++ build (docs/NOTES.md): rebuilt with the system g++ so the
  # suite still runs, and reported.
  if ! (cd /tmp && python3 -c "import torch, normkit; normkit.plan_backward('layer_norm', 64, 1024, torch.float16)") > /dev/null 2>&1; then
    say "FAIL  python-import-check: the installed extension crashes on a plan query; rebuilding with CXX=/usr/bin/g++"
    CXX=/usr/bin/g++ CC=/usr/bin/gcc MAX_JOBS=$JOBS run_stage pip-system-gxx python3 -m pip install --no-build-isolation --no-deps -v .
  fi
  # AOTInductor compiles its package's .so with $CXX too: where setup.py refused that compiler (it links
  # libstdc++ statically), loading the package segfaulted in the suite (session 30: the H200 image's
  # CXX=/opt/gcc/bin/g++; 1 passed with CXX=/usr/bin/g++). The suite runs with the compiler the build took.
  PYTEST_CXX=$(grep -oE "building with [^ ]+ instead" "$LOGS/pip.log" | head -1 | awk '{print $3}')
  [ -n "$PYTEST_CXX" ] && say "  pytest runs with CXX=$PYTEST_CXX (the compiler the build took; AOTInductor's too)"
  # Worker processes (pytest-xdist, installed there): a crash in one test is reported as that test's
  # failure instead of ending the run. -v names each test as it ends: the log names a failure even where
  # pytest's summary is lost (session 33 ran -q under a timeout and lost one that way: docs/NOTES.md entry 88).
  if [ -n "$PYTEST_CXX" ]; then
    CXX=$PYTEST_CXX run_stage pytest python3 -m pytest -v -rfE -n 2 --timeout=900 tests/python
  else
    run_stage pytest python3 -m pytest -v -rfE -n 2 --timeout=900 tests/python
  fi
  grep -E "(FAILED|ERROR) " "$LOGS/pytest.log" | grep -v "^FAILED\|^ERROR" | sort -u | head -20 | sed 's/^/  /' | tee -a "$SUMMARY"
  tail -n 3 "$LOGS/pytest.log" | sed 's/^/  /' | tee -a "$SUMMARY"
fi
if has_stage pyprobe; then
  run_stage pyprobe bash scripts/python-build-probe.sh
  grep -vE "^default g\+\+: #define _PSTL" "$LOGS/pyprobe.log" | sed 's/^/  /' | tee -a "$SUMMARY"
fi
# The stages below that import normkit without the `python` stage install it once first.
installed=0
ensure_installed() {
  if has_stage python || [ $installed = 1 ]; then return; fi
  MAX_JOBS=$JOBS run_stage pip python3 -m pip install --no-build-isolation --no-deps -v .
  installed=1
}
if has_stage pysmoke; then
  # One check per fresh process (scripts/python-smoke.sh), for a crash of the installed package.
  ensure_installed
  run_stage pysmoke bash scripts/python-smoke.sh
  grep -E "^(PASS|FAIL)|^compiler|^ldd" "$LOGS/pysmoke.log" | sed 's/^/  /' | tee -a "$SUMMARY"
fi
# Nsight Compute (the profile stages), and Liger from a source copy in the ignored
# third_party_peers/liger (carried to the GPU machine), when present (the peer stages).
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
LIGER_ARGS=()
[ -d third_party_peers/liger/liger_kernel ] && LIGER_ARGS=(--liger-path "$ROOT/third_party_peers/liger")
BENCH=${PREBUILT:+$PREBUILT/normkit-bench}
BENCH=${BENCH:-$BUILD/bench/normkit-bench}
if has_stage bench || has_stage seed; then
  run_stage bench-seed "$BENCH" --suite seed --mode both --commit "$COMMIT" --md "$RESULTS/h200-seed.md" --json "$RESULTS/h200-seed.json"
fi
if has_stage bench || has_stage llm; then
  run_stage bench-llm "$BENCH" --suite llm --mode graph --iters 20 --warmup 3 --budget 0.5 --commit "$COMMIT" --md "$RESULTS/h200-llm.md" --json "$RESULTS/h200-llm.json"
fi
if has_stage racecheck; then
  SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
  GPU_TESTS=${PREBUILT:+$PREBUILT/normkit_gpu_tests}
  GPU_TESTS=${GPU_TESTS:-$BUILD/tests/normkit_gpu_tests}
  if [ -z "$SANITIZER" ]; then
    say "FAIL  racecheck: compute-sanitizer not found"
  else
    run_stage racecheck "$SANITIZER" --tool racecheck --racecheck-report all --error-exitcode 1 "$GPU_TESTS" \
      --gtest_filter="${RACECHECK_FILTER:-Staged/*M9001*:Staged/*M6000*:Staged/*M262147*}"
    grep -E "RACECHECK SUMMARY|\[  PASSED  \]|\[  FAILED  \]" "$LOGS/racecheck.log" | sed 's/^/  /' | tee -a "$SUMMARY"
  fi
fi
if has_stage llm-unstaged; then
  # A/B of the row staging: the llm suite with RowShape::stages = 0 (rows loaded straight into registers).
  printf 'row_pipeline_stages = 0\n' > "$WORK/unstaged.table"
  NORMKIT_PLANNER_TABLE="$WORK/unstaged.table" run_stage bench-llm-unstaged "$BENCH" --suite llm --mode graph --iters 20 \
    --warmup 3 --budget 0.5 --commit "$COMMIT+unstaged" --md "$RESULTS/h200-llm-unstaged.md" --json "$RESULTS/h200-llm-unstaged.json"
fi
if has_stage profile-wide; then
  # Nsight Compute on the streamed forward and dX kernels at 2048 x 65536 bf16 (DRAM vs L2 traffic).
  for kernel in forward_kernel backward_dx_kernel; do
    run_stage "profile-wide-$kernel" "$NCU" --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section MemoryWorkloadAnalysis -k "regex:$kernel" -c 1 \
      "$BENCH" --shape 2048,65536 --op ln_fwd,ln_bwd --dtype bf16 --strategy tiled --mode events --iters 1 --warmup 0 --runs 1
  done
fi
if has_stage host; then
  # Host time per call of the PyTorch ops against ATen's (bench/host_overhead.py); HOST_ARGS adds options.
  ensure_installed
  run_stage host python3 bench/host_overhead.py --commit "$COMMIT" --md "$RESULTS/h200-host-overhead.md" ${HOST_ARGS:-}
  grep -E "^\| (ln|rms)_" "$LOGS/host.log" | sed 's/^/  /' | tee -a "$SUMMARY"
fi
if has_stage e2e; then
  # E2E_ARGS replaces the default options, e.g. "--profile --models bart --precisions bf16".
  ensure_installed
  run_stage e2e timeout "${E2E_TIMEOUT:-600}" python3 bench/e2e.py --commit "$COMMIT" ${E2E_ARGS:---out $RESULTS/h200-e2e.md}
  grep -E "steps/s|^## " "$LOGS/e2e.log" | sed 's/^/  /' | tee -a "$SUMMARY"
fi
if has_stage sweep; then
  # SWEEP_DTYPES / SWEEP_OPS narrow the grid when device time is short; plots are redrawn after each dtype.
  for dt in ${SWEEP_DTYPES:-f16 bf16}; do
    run_stage "sweep-$dt" "$BENCH" --sweep --quick --dtype "$dt" --op "${SWEEP_OPS:-ln_gb,rms_gb,ln_bwd}" --commit "$COMMIT" \
      --json "$RESULTS/h200-sweep-$dt.json" --csv "$RESULTS/h200-sweep-$dt.csv"
    run_stage plot python3 bench/plot.py "$RESULTS"/h200-sweep-*.json --out-dir "$RESULTS"
  done
fi
if has_stage profile; then
  # Nsight Compute on the two kernels the large-shape targets hinge on (forward, fused backward),
  # 131072 x 4096 bf16 unless PROFILE_SHAPE (M,N) / PROFILE_KERNELS / PROFILE_OPS say otherwise:
  # occupancy, throughput and warp stall reasons.
  for kernel in ${PROFILE_KERNELS:-forward_kernel fused_backward_kernel}; do
    run_stage "profile-$kernel" "$NCU" --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      --section InstructionStats --section SchedulerStats -k "regex:$kernel" -c 1 \
      "$BENCH" --shape "${PROFILE_SHAPE:-131072,4096}" --op "${PROFILE_OPS:-ln_fwd,ln_bwd}" --dtype bf16 --strategy fused \
      --mode events --iters 1 --warmup 0 --runs 1
  done
fi
if has_stage profile-peers; then
  # Nsight Compute on normkit's kernels (normkit-bench, auto plan) and the peers' (bench/peer_kernels.py)
  # for the same bench/peers.py cases: PROFILE_CASES (default: the three small seed cases),
  # PROFILE_PEERS (default liger,eager), PROFILE_PEER_OP fwd or full (default fwd), PROFILE_REGEX the
  # kernels' names (default: normkit's, ATen's, Liger's and Inductor's norm kernels, not the bench's
  # input fills). Duration, instructions, launch shape, warp states.
  NCU_ARGS=(--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats
            --metrics gpu__time_duration.sum,smsp__inst_executed.sum -k "regex:${PROFILE_REGEX:-forward|backward|layer_norm|rms_norm|gamma|tiled|partial}" -c 12)
  PEER_OP=${PROFILE_PEER_OP:-fwd}
  for case in $(echo "${PROFILE_CASES:-tile8_small,tile64_medium,tile128_medium}" | tr ',' ' '); do
    read -r m n dt family < <(python3 bench/peer_kernels.py --cases "$case" --describe)
    [ "$PEER_OP" = fwd ] && bench_op=${family}_fwd || bench_op=${family}_bwd
    run_stage "profile-peers-$case-normkit" "$NCU" "${NCU_ARGS[@]}" "$BENCH" --shape "$m,$n" --op "$bench_op" --dtype "$dt" \
      --strategy auto --mode events --iters 2 --warmup 0 --runs 1
    run_stage "profile-peers-$case" "$NCU" "${NCU_ARGS[@]}" python3 bench/peer_kernels.py --cases "$case" \
      --peers "${PROFILE_PEERS:-liger,eager}" --ops "$PEER_OP" --calls 2 "${LIGER_ARGS[@]}"
    grep -hE "^  [^ ].*\(|Duration|gpu__time_duration|smsp__inst_executed.sum|Grid Size|Block Size" \
      "$LOGS/profile-peers-$case-normkit.log" "$LOGS/profile-peers-$case.log" | cut -c1-120 | sed "s/^/  $case: /" >> "$LOGS/profile-peers-summary.txt"
  done
fi
if has_stage ceiling; then
  # The streaming ceiling (bench/streaming_ceiling.cu): the best a kernel moving the full backward's bytes reaches.
  run_stage ceiling-build nvcc -arch=sm_${CUDA_ARCH} -O3 -o "$WORK/streaming_ceiling" bench/streaming_ceiling.cu
  run_stage ceiling bash -c "'$WORK/streaming_ceiling' > '$RESULTS/h200-streaming-ceiling.md'"
  sed 's/^/  /' "$RESULTS/h200-streaming-ceiling.md" | tee -a "$SUMMARY"
fi
if has_stage tune; then
  # normkit-bench --tune on this GPU: the table it writes and its report (TUNE_DTYPE, default bf16).
  run_stage tune "$BENCH" --tune "$RESULTS/h200-tune-${TUNE_DTYPE:-bf16}.table" --dtype "${TUNE_DTYPE:-bf16}" --commit "$COMMIT" \
    --md "$RESULTS/h200-tune-${TUNE_DTYPE:-bf16}.md" --json "$RESULTS/h200-tune-${TUNE_DTYPE:-bf16}.json"
  grep -E "^- (default|tuned|fused)|score" "$RESULTS/h200-tune-${TUNE_DTYPE:-bf16}.md" 2>/dev/null | cut -c1-220 | sed 's/^/  /' | tee -a "$SUMMARY"
fi
if has_stage tables; then
  # e.g. PROBE_TABLES="default:;items2:row_items_target=2;nosplit:row_split_max=1"
  IFS=';' read -r -a PROBE_SPECS <<< "${PROBE_TABLES:-default:}"
  read -r -a PROBE_BENCH_ARGS <<< "${PROBE_ARGS:---suite llm --mode graph --iters 20 --warmup 3 --budget 0.5}"
  for spec in "${PROBE_SPECS[@]}"; do
    name=${spec%%:*}
    keys=${spec#*:}
    [ "$name" = "$spec" ] && keys=""
    table="$WORK/probe-$name.table"
    printf '%s\n' "${keys//,/$'\n'}" > "$table"
    NORMKIT_PLANNER_TABLE="$table" run_stage "tables-$name" "$BENCH" "${PROBE_BENCH_ARGS[@]}" \
      --commit "$COMMIT+table:$name" --md "$RESULTS/probe-$name.md" --json "$RESULTS/probe-$name.json"
    say "  table $name: ${keys:-(built-in)} -> results/probe-$name.md"
  done
fi
if has_stage ab; then
  BASE_BENCH=""
  if [ -n "${BASE_PREBUILT:-}" ]; then
    BASE_BENCH=$(unpack_prebuilt "$BASE_PREBUILT" "$WORK/base-prebuilt")/normkit-bench
    [ -x "$BASE_BENCH" ] || BASE_BENCH=""
  fi
  if [ -z "$BASE_BENCH" ]; then
    say "FAIL  ab: BASE_PREBUILT must name a folder holding normkit-bench (or normkit-bench.xz)"
  else
    read -r -a AB_BENCH_ARGS <<< "${AB_ARGS:---suite seed --mode graph}"
    AB_A=() AB_B=()
    for round in $(seq 1 "${AB_ROUNDS:-2}"); do
      run_stage "ab-base$round" "$BASE_BENCH" "${AB_BENCH_ARGS[@]}" --commit "base" --md "$RESULTS/ab-base$round.md" \
        --json "$RESULTS/ab-base$round.json"
      run_stage "ab-new$round" "$BENCH" "${AB_BENCH_ARGS[@]}" --commit "$COMMIT" --md "$RESULTS/ab-new$round.md" \
        --json "$RESULTS/ab-new$round.json"
      AB_A+=("$RESULTS/ab-base$round.json") AB_B+=("$RESULTS/ab-new$round.json")
    done
    run_stage ab-compare python3 bench/compare_ab.py --a "${AB_A[@]}" --b "${AB_B[@]}" --labels base "$COMMIT" \
      --md "$RESULTS/ab.md"
    say "  ab: ${AB_BENCH_ARGS[*]} -> results/ab.md"
  fi
fi
if has_stage clocks; then
  # Whether the spread between repeats of one measurement follows the SM clock (the wide rows' times
  # moved 10 % between calls minutes apart: the power cap, docs/NOTES.md entries 75-76): CLOCK_REPEATS
  # rounds (default 5) of one normkit-bench invocation per shape of CLOCK_SHAPES and op list of CLOCK_OPS
  # (CLOCK_ARGS: the rest of its arguments), while nvidia-smi samples the clocks, power, temperature and
  # clock-event reasons every 50 ms; bench/clock_spread.py sets each measurement's time beside the samples
  # of its own window (normkit-bench's wall_start_ms / wall_end_ms).
  reasons=clocks_event_reasons.active
  nvidia-smi --query-gpu=$reasons --format=csv,noheader > /dev/null 2>&1 || reasons=clocks_throttle_reasons.active
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$reasons \
    --format=csv,noheader,nounits -lms 50 > "$LOGS/clocks.csv" 2>&1 &
  sampler=$!
  read -r -a CLOCK_BENCH_ARGS <<< "${CLOCK_ARGS:---dtype bf16 --strategy auto --mode graph --runs 1 --iters 200}"
  : > "$WORK/clock-windows.txt"
  for round in $(seq 1 "${CLOCK_REPEATS:-5}"); do
    for shape in ${CLOCK_SHAPES:-4096x262144 2048x65536}; do
      for op in ${CLOCK_OPS:-ln_bwd rms_bwd ln_fwd}; do
        json="$RESULTS/clocks-$round-$shape-$op.json"
        start=$(date +%s.%N)
        "$BENCH" --shape "$shape" --op "$op" "${CLOCK_BENCH_ARGS[@]}" --commit "$COMMIT" --json "$json" \
          >> "$LOGS/clocks-bench.log" 2>&1
        echo "$json $start $(date +%s.%N)" >> "$WORK/clock-windows.txt"
      done
    done
  done
  kill "$sampler" 2> /dev/null
  run_stage clocks python3 bench/clock_spread.py --windows "$WORK/clock-windows.txt" --samples "$LOGS/clocks.csv" \
    --md "$RESULTS/clocks.md"
  sed -n '/^| case | op | dtype | strategy | repeats/,$p' "$RESULTS/clocks.md" | sed 's/^/  /' | tee -a "$SUMMARY"
fi
if has_stage peers; then
  # normkit through its Python layer (installed here unless the python stage did, or PEERS_REUSE_INSTALL=1
  # on a machine still warm from a call that installed this commit); Liger when present (LIGER_ARGS
  # above). PEERS_ARGS adds options, e.g. "--part 1/2" for one of a run split over calls (each case
  # compiles torch.compile anew: 161 s for the 41 cases on an H100 at 38f21c6, one call with the pip
  # build; peers.py --merge joins parts). Then the issue's targets counted from it (bench/scorecard.py).
  if [ "${PEERS_REUSE_INSTALL:-0}" = 1 ] && python3 -c "import sys, normkit; sys.exit(not normkit.cuda_available())" 2>/dev/null; then
    say "  peers: normkit as installed by an earlier call on this machine (PEERS_REUSE_INSTALL=1)"
  else
    has_stage python || has_stage pysmoke || MAX_JOBS=$JOBS run_stage pip python3 -m pip install --no-build-isolation --no-deps -v .
  fi
  run_stage peers python3 bench/peers.py --commit "$COMMIT" --compile-budget "${PEERS_COMPILE_BUDGET:-400}" \
    --time-budget "${PEERS_BUDGET:-400}" "${LIGER_ARGS[@]}" --out "$RESULTS/h200-peers.md" ${PEERS_ARGS:-}
  tail -n 5 "$LOGS/peers.log" | sed 's/^/  /' | tee -a "$SUMMARY"
  run_stage scorecard python3 bench/scorecard.py "$RESULTS/h200-peers.json" --md "$RESULTS/h200-scorecard.md"
  grep -E '^- \*\*' "$RESULTS/h200-scorecard.md" 2>/dev/null | cut -c1-160 | sed 's/^/  /' | tee -a "$SUMMARY"
fi

pack
echo
echo "================ gpu-check summary ================"
cat "$SUMMARY"
grep -q '^FAIL' "$SUMMARY" && exit 1 || exit 0
