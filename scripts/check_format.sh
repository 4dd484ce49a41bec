#!/usr/bin/env bash
# Checks that C and C++ sources follow the repository's .clang-format (exit 1 naming the files
# that do not; fix them with `clang-format -i --style=file FILE`).
#   scripts/check_format.sh             every tracked .c/.h/.cpp file except fuzz corpora
#   scripts/check_format.sh FILE...     only these files
# The tree is formatted with Debian's clang-format 14; other major versions format some
# constructs differently, so the check refuses to judge with them (exit 77).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command -v clang-format > /dev/null 2>&1 || { echo "check_format.sh: clang-format not installed (scripts/setup.sh)" >&2; exit 77; }
major=$(clang-format --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if [ "$major" != 14 ]; then
  echo "check_format.sh: clang-format $major found; the tree is formatted with version 14" >&2
  exit 77
fi
if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' | grep -v '^fuzz/corpus/')
fi
[ ${#files[@]} -gt 0 ] || { echo "check_format.sh: no files to check" >&2; exit 2; }
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "check_format.sh: no such file: $f" >&2; exit 2; }
  clang-format --dry-run --Werror --style=file "$f" > /dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -ne 0 ]; then
  echo "check_format.sh: ${#bad[@]} of ${#files[@]} file(s) differ from .clang-format:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix: clang-format -i --style=file FILE..." >&2
  exit 1
fi
echo "check_format.sh: ${#files[@]} files follow .clang-format"
