#!/usr/bin/env bash
# Fails when a ctest run skipped a test it should have run. CI installs every dependency, so a
# skip there means a broken tool or a missing reference, not an absent one.
#   scripts/check_skips.sh CTEST_OUTPUT_FILE [MORE_EXPECTED_SKIPS]
# Allowed: a test whose ISA suffix (.avx2 / .avx512 / .amx) names an ISA this CPU lacks, the
# patterns of .ci/expected-skips (each with its reason) and those of MORE_EXPECTED_SKIPS (same
# format; e.g. .ci/expected-skips-generic for a build without the x86 kernels).
set -euo pipefail
log=${1:?usage: check_skips.sh CTEST_OUTPUT_FILE [MORE_EXPECTED_SKIPS]}
root=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$log" ] || { echo "check_skips.sh: no such file: $log" >&2; exit 2; }
[ -z "${2:-}" ] || [ -f "$2" ] || { echo "check_skips.sh: no such file: $2" >&2; exit 2; }

has_flag() { grep -qw "$1" /proc/cpuinfo 2>/dev/null; }
patterns=()
while IFS= read -r line; do
  line=${line%%  #*}
  [[ -z "${line// }" || "$line" == \#* ]] && continue
  patterns+=("$line")
done < <(cat "$root/.ci/expected-skips" ${2:+"$2"})

unexpected=()
n_skipped=0
while IFS= read -r name; do
  n_skipped=$((n_skipped + 1))
  case "$name" in
    *.avx2) has_flag avx2 || continue ;;
    *.avx512) has_flag avx512f || continue ;;
    *.amx) has_flag amx_tile || continue ;;
  esac
  ok=0
  for p in "${patterns[@]}"; do
    if [[ "$name" =~ $p ]]; then ok=1; break; fi
  done
  [ $ok -eq 1 ] || unexpected+=("$name")
done < <(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$log")

if [ ${#unexpected[@]} -ne 0 ]; then
  echo "check_skips.sh: ${#unexpected[@]} test(s) skipped that CI must run (dependency or tool broken?):" >&2
  printf '  %s\n' "${unexpected[@]}" >&2
  exit 1
fi
echo "check_skips.sh: $n_skipped skipped test(s), all expected on this CPU"
