#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, -DCBX_FUZZ=ON) and runs every built fuzz_* binary for
# a time budget each. Exits non-zero if any target finds a crash, leak, timeout or OOM.
#   scripts/fuzz.sh [SECONDS_PER_TARGET=60] [NAME_FILTER]
# Env: CBX_FUZZ_BUILD_DIR (default build-fuzz), CBX_FUZZ_WORK_DIR (corpora, artifacts, logs;
# default $CBX_FUZZ_BUILD_DIR/fuzz-work), CC/CXX (default clang/clang++).
# Per target fuzz_X: seeds come from scripts/fuzz_seed_X.sh CORPUS_DIR if it exists, and
# fuzz/fuzz_X.dict is passed as a dictionary if it exists.
set -euo pipefail
secs=${1:-60}
filter=${2:-}
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
  echo "fuzz.sh: SECONDS_PER_TARGET must be a positive integer (0 would mean no limit)" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
build=${CBX_FUZZ_BUILD_DIR:-$root/build-fuzz}
work=${CBX_FUZZ_WORK_DIR:-$build/fuzz-work}

targets=()
for src in "$root"/fuzz/fuzz_*.cpp; do
  [ -e "$src" ] || continue
  name=$(basename "$src" .cpp)
  [[ -z "$filter" || "$name" == *"$filter"* ]] && targets+=("$name")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz.sh: no fuzz/fuzz_*.cpp targets${filter:+ matching '$filter'}" >&2
  exit 1
fi

CC=${CC:-clang} CXX=${CXX:-clang++} cmake -S "$root" -B "$build" -G Ninja -DCBX_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target "${targets[@]}"

# The CMake fuzz build compiles UBSan in recoverable mode; make any UB report a finding.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

failed=()
for name in "${targets[@]}"; do
  bin=$build/bin/$name
  if [ ! -x "$bin" ]; then
    echo "fuzz.sh: $name was not built" >&2
    failed+=("$name(not built)")
    continue
  fi
  corpus=$work/corpus/$name
  artifacts=$work/artifacts/$name
  mkdir -p "$corpus" "$artifacts"
  seed=$root/scripts/fuzz_seed_${name#fuzz_}.sh
  [ -f "$seed" ] && bash "$seed" "$corpus"
  args=(-max_total_time="$secs" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$artifacts/")
  [ -f "$root/fuzz/$name.dict" ] && args+=(-dict="$root/fuzz/$name.dict")
  log=$work/$name.log
  echo "== $name: ${secs}s, corpus $corpus"
  if "$bin" "${args[@]}" "$corpus" >"$log" 2>&1; then
    grep -E "^Done [0-9]+ runs|^stat::number_of_executed_units" "$log" || true
  else
    rc=$?
    echo "fuzz.sh: $name FAILED (exit $rc); log $log, artifacts in $artifacts" >&2
    tail -n 60 "$log" >&2
    failed+=("$name")
  fi
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz.sh: findings in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} target(s) ran ${secs}s each, no findings"
