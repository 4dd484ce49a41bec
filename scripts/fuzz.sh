#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, -DCBX_FUZZ=ON) and, per fuzz_* target:
#   1. regression: runs every input of the committed corpus fuzz/corpus/fuzz_X/ and every
#      reproducer under ../shared/data/fuzz/ (files named X-*, or in a folder X/) once;
#   2. fuzzing: SECONDS_PER_TARGET of libFuzzer with a fixed -seed, starting from a fresh corpus
#      (the committed one plus scripts/fuzz_seed_X.sh's seeds), with fuzz/fuzz_X.dict if present.
# Exits non-zero if any target crashes, leaks, times out or runs out of memory in either step.
#   scripts/fuzz.sh [SECONDS_PER_TARGET=60] [NAME_FILTER]
# Env: CBX_FUZZ_BUILD_DIR (default build-fuzz), CBX_FUZZ_WORK_DIR (corpora, artifacts, logs;
#      default $CBX_FUZZ_BUILD_DIR/fuzz-work), CC/CXX (default clang/clang++),
#      CBX_FUZZ_SEED (default 1; 0 = libFuzzer picks one: use for long discovery runs),
#      CBX_FUZZ_KEEP_CORPUS=1 (grow the work corpus across runs instead of starting fresh),
#      CBX_FUZZ_REPRO_DIR (default ../shared/data/fuzz next to the checkout),
#      CBX_FUZZ_JOBS (parallel fuzzing processes per target; default 1),
#      CBX_FUZZ_PARALLEL (targets regression-tested and fuzzed at once; default 1).
# README's "Fuzzing" section says where findings go and how to commit a reproducer.
set -euo pipefail
secs=${1:-60}
filter=${2:-}
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
  echo "fuzz.sh: SECONDS_PER_TARGET must be a positive integer (0 would mean no limit)" >&2
  exit 2
fi
seed=${CBX_FUZZ_SEED:-1}
if ! [[ "$seed" =~ ^[0-9]+$ ]]; then
  echo "fuzz.sh: CBX_FUZZ_SEED must be a non-negative integer" >&2
  exit 2
fi
for v in CBX_FUZZ_JOBS CBX_FUZZ_PARALLEL; do
  if ! [[ "${!v:-1}" =~ ^[1-9][0-9]*$ ]]; then
    echo "fuzz.sh: $v must be a positive integer, got '${!v}'" >&2
    exit 2
  fi
done
root=$(cd "$(dirname "$0")/.." && pwd)
build=${CBX_FUZZ_BUILD_DIR:-$root/build-fuzz}
work=${CBX_FUZZ_WORK_DIR:-$build/fuzz-work}
repro_dir=${CBX_FUZZ_REPRO_DIR:-$root/../shared/data/fuzz}

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
# Leaks inside system libraries that our code cannot free (each entry says which and why).
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/fuzz/lsan.supp:print_suppressions=0}
common=(-timeout=30 -rss_limit_mb=2048)
fork_jobs=${CBX_FUZZ_JOBS:-1}
parallel=${CBX_FUZZ_PARALLEL:-1}

# One target: regression, then fuzzing. Its report goes to stdout and stderr; its outcome to the
# file $2: empty when clean, else what failed (also when the function stops early, e.g. on
# set -e in a seed script).
run_target() {
  local name=$1 status=$2
  local bin=$build/bin/$name
  echo "$name(stopped early)" >"$status"
  if [ ! -x "$bin" ]; then
    echo "fuzz.sh: $name was not built" >&2
    echo "$name(not built)" >"$status"
    return
  fi
  local short=${name#fuzz_}
  local artifacts=$work/artifacts/$name
  mkdir -p "$artifacts"
  local log=$work/$name.log

  # 1. Regression: the committed corpus and the shared reproducers, each input once.
  local inputs=() f i
  local committed=$root/fuzz/corpus/$name
  [ -d "$committed" ] && inputs+=("$committed")
  if [ -d "$repro_dir" ]; then
    for f in "$repro_dir/$short"-* "$repro_dir/$short"/*; do
      [ -f "$f" ] && inputs+=("$f")
    done
  fi
  if [ ${#inputs[@]} -gt 0 ]; then
    local n_repro=0
    for i in "${inputs[@]}"; do [ -f "$i" ] && n_repro=$((n_repro + 1)); done
    echo "== $name: regression ($([ -d "$committed" ] && ls "$committed" | wc -l || echo 0) committed inputs, $n_repro reproducer(s))"
    # Files are run one by one; a folder is read as a corpus (-runs=0: run it, mutate nothing).
    local files=() dirs=() ok=1
    for i in "${inputs[@]}"; do if [ -d "$i" ]; then dirs+=("$i"); else files+=("$i"); fi; done
    if [ ${#dirs[@]} -gt 0 ] && ! "$bin" "${common[@]}" -runs=0 -artifact_prefix="$artifacts/" "${dirs[@]}" \
      >"$log.regression" 2>&1; then ok=0; fi
    if [ $ok -eq 1 ] && [ ${#files[@]} -gt 0 ] && ! "$bin" "${common[@]}" -artifact_prefix="$artifacts/" \
      "${files[@]}" >>"$log.regression" 2>&1; then ok=0; fi
    if [ $ok -eq 0 ]; then
      echo "fuzz.sh: $name FAILED its regression inputs; log $log.regression" >&2
      tail -n 60 "$log.regression" >&2
      echo "$name(regression)" >"$status"
      return
    fi
  fi

  # 2. Fuzzing from a fresh corpus (unless kept), fixed seed: the same inputs in the same order
  # on every run, so a CI failure reproduces with the same command.
  local corpus=$work/corpus/$name
  [ "${CBX_FUZZ_KEEP_CORPUS:-0}" = 1 ] || rm -rf "$corpus"
  mkdir -p "$corpus"
  [ -d "$committed" ] && cp -n "$committed"/* "$corpus"/ 2>/dev/null || true
  local seeder=$root/scripts/fuzz_seed_$short.sh
  [ -f "$seeder" ] && bash "$seeder" "$corpus"
  local args=("${common[@]}" -max_total_time="$secs" -seed="$seed" -print_final_stats=1 -artifact_prefix="$artifacts/")
  [ -f "$root/fuzz/$name.dict" ] && args+=(-dict="$root/fuzz/$name.dict")
  [ "$fork_jobs" -gt 1 ] && args+=(-fork="$fork_jobs")
  echo "== $name: ${secs}s, seed $seed, corpus $corpus"
  local rc=0
  "$bin" "${args[@]}" "$corpus" >"$log" 2>&1 || rc=$?
  if [ $rc -eq 0 ]; then
    grep -E "^Done [0-9]+ runs|^stat::number_of_executed_units|^#[0-9]+.*DONE" "$log" | tail -n 2 || true
    : >"$status"
  else
    echo "fuzz.sh: $name FAILED (exit $rc); log $log, artifacts in $artifacts" >&2
    echo "fuzz.sh: reproduce with: $bin ${common[*]} $artifacts/<crash-file>" >&2
    tail -n 60 "$log" >&2
    echo "$name" >"$status"
  fi
}

# Up to $parallel targets at a time, each into its own report file; the reports are printed in
# target order once all have finished, so the log reads as if they had run one after another.
rm -rf "$work/status"
mkdir -p "$work/status"
for name in "${targets[@]}"; do
  while [ "$(jobs -pr | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  run_target "$name" "$work/status/$name" >"$work/status/$name.report" 2>&1 &
done
wait || true
failed=()
for name in "${targets[@]}"; do
  cat "$work/status/$name.report"
  if [ ! -e "$work/status/$name" ]; then
    failed+=("$name(no report)")
  elif [ -s "$work/status/$name" ]; then
    failed+=("$(cat "$work/status/$name")")
  fi
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz.sh: findings in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} target(s): regression inputs clean, ${secs}s of fuzzing each (seed $seed), no findings"
