#!/bin/bash
# The sources follow .clang-format (scripts/check_format.sh), and the check does catch a file
# that does not: a badly formatted copy of a source file must be named and fail.
# Usage: test_format.sh BUILD_DIR   (exit 77 = skipped: no clang-format 14, or not a git checkout)
set -u
SRC=${CBX_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
CHECK=$SRC/scripts/check_format.sh
fail() { echo "FAIL: $*"; exit 1; }
git -C "$SRC" rev-parse --is-inside-work-tree > /dev/null 2>&1 || { echo "skip: $SRC is not a git checkout"; exit 77; }

out=$(bash "$CHECK" 2>&1)
rc=$?
[ $rc -eq 77 ] && { echo "skip: $out"; exit 77; }
[ $rc -eq 0 ] || fail "the tree does not follow .clang-format: $out"
echo "$out"

# A copy of a real source with its indentation and line breaks damaged, beside a copy of
# .clang-format (same file name as the original: the main-header rule of include ordering
# depends on it).
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cp "$SRC/.clang-format" "$T/.clang-format"
mkdir "$T/bad" "$T/good"
sed -e 's/^  //' -e 's/) {$/)\n{/' "$SRC/src/core/arena.cpp" > "$T/bad/arena.cpp"
out=$(bash "$CHECK" "$T/bad/arena.cpp" 2>&1)
rc=$?
[ $rc -eq 1 ] || fail "a misformatted file passed the check (exit $rc): $out"
printf '%s\n' "$out" | grep -q "bad/arena.cpp" || fail "the check did not name the misformatted file: $out"
cp "$SRC/src/core/arena.cpp" "$T/good/arena.cpp"
bash "$CHECK" "$T/good/arena.cpp" > /dev/null 2>&1 || fail "a well-formatted copy failed the check"
echo "PASS: test_format"
