#!/usr/bin/env bash
# Packaging (issue 26): chatterbox.cpp as another project sees it.
#  1. `cmake --install` of this build into a folder inside it: the header (and no other), the
#     library, chatterbox.pc, the CMake package and the tools; a shared library exports only
#     the functions chatterbox.h declares.
#  2. tests/package/consumer/main.c built against that prefix with pkg-config and with
#     find_package(chatterbox); both run, synthesizing with a tiny model.
#  3. The same consumer through add_subdirectory of the source tree, with the other library
#     flavour (static when this build is shared, and the reverse); then that build installed
#     and consumed with pkg-config and find_package again.
# Usage: test_package.sh BUILD_DIR
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SRC=${CBX_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
CONSUMER=$SRC/tests/package/consumer
W=$BUILD/package-test
rm -rf "$W"
mkdir -p "$W"

fail() {
  echo "FAIL: $*"
  exit 1
}
cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }

CC_BIN=$(cache CMAKE_C_COMPILER)
GENERATOR=$(cache CMAKE_GENERATOR)
SHARED=$(cache BUILD_SHARED_LIBS)
CMAKE_ARGS=(-G "$GENERATOR" -DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$(cache CMAKE_CXX_COMPILER)")
for v in CMAKE_C_COMPILER_LAUNCHER CMAKE_CXX_COMPILER_LAUNCHER; do
  [ -n "$(cache $v)" ] && CMAKE_ARGS+=(-D$v="$(cache $v)")
done

# A tiny Turbo model for the consumers to speak with.
"$BUILD/bin/chatterbox-mkckpt" --variant turbo --size tiny --seed 1 "$W/ckpt" > /dev/null 2>&1 || fail "mkckpt"
"$BUILD/bin/chatterbox" convert "$W/ckpt" -o "$W/tiny.gguf" --type f32 --quiet > /dev/null || fail "convert"

# check_prefix PREFIX SHARED(ON/OFF) TOOLS(yes/no)
check_prefix() {
  local p=$1 libdir
  [ "$(ls "$p/include")" = "chatterbox.h" ] || fail "$p/include holds more than chatterbox.h: $(ls "$p/include")"
  libdir=$(dirname "$(find "$p" -name chatterbox.pc)")/..
  [ -f "$libdir/pkgconfig/chatterbox.pc" ] || fail "no chatterbox.pc under $p"
  [ -f "$libdir/cmake/chatterbox/chatterboxConfig.cmake" ] || fail "no CMake package under $libdir"
  [ -f "$libdir/cmake/chatterbox/chatterboxConfigVersion.cmake" ] || fail "no package version file"
  if [ "$2" = ON ]; then
    [ -L "$libdir/libchatterbox.so" ] || fail "no libchatterbox.so link in $libdir"
    # Exactly the functions chatterbox.h declares (CBX_API), nothing else of the engine.
    local exported declared
    exported=$(nm -D --defined-only "$libdir/libchatterbox.so" | awk '$2 ~ /^[TWVBDR]$/ {print $3}' | sort)
    declared=$(grep -o '^CBX_API [^(]*(' "$SRC/include/chatterbox.h" | sed 's/($//; s/.* \**//' | sort)
    [ "$exported" = "$declared" ] ||
      fail "libchatterbox.so exports other symbols than chatterbox.h declares: $(diff <(echo "$declared") <(echo "$exported") | grep '^[<>]' | head -20)"
  else
    [ -f "$libdir/libchatterbox.a" ] || fail "no libchatterbox.a in $libdir"
    [ ! -e "$libdir/libchatterbox.so" ] || fail "a static build installed libchatterbox.so"
  fi
  if [ "$3" = yes ]; then
    [ -x "$p/bin/chatterbox" ] && [ -x "$p/bin/chatterbox-mkckpt" ] || fail "tools not installed in $p/bin"
  fi
  LIBDIR=$(cd "$libdir" && pwd)
}

# consume_installed PREFIX NAME: pkg-config and find_package consumers, built and run.
consume_installed() {
  local p=$1 out=$W/$2 flags
  mkdir -p "$out"
  flags=$(PKG_CONFIG_PATH=$LIBDIR/pkgconfig pkg-config --cflags --libs chatterbox) ||
    fail "pkg-config chatterbox ($p)"
  # shellcheck disable=SC2086 # word splitting of the flags is wanted
  "$CC_BIN" -std=c11 -Wall -Werror "$CONSUMER/main.c" -o "$out/consumer-pc" $flags || fail "pkg-config build ($p)"
  LD_LIBRARY_PATH=$LIBDIR "$out/consumer-pc" "$W/tiny.gguf" || fail "pkg-config consumer ($p)"

  cmake -S "$CONSUMER" -B "$out/fp" "${CMAKE_ARGS[@]}" -DCMAKE_PREFIX_PATH="$p" > "$out/fp.log" 2>&1 ||
    { cat "$out/fp.log"; fail "find_package configure ($p)"; }
  cmake --build "$out/fp" > "$out/fp-build.log" 2>&1 || { cat "$out/fp-build.log"; fail "find_package build ($p)"; }
  "$out/fp/consumer" "$W/tiny.gguf" || fail "find_package consumer ($p)"
}

echo "== install of $BUILD (BUILD_SHARED_LIBS=$SHARED)"
cmake --install "$BUILD" --prefix "$W/prefix" > "$W/install.log" || { cat "$W/install.log"; fail "cmake --install"; }
check_prefix "$W/prefix" "$SHARED" yes
consume_installed "$W/prefix" installed

if [ "$SHARED" = ON ]; then OTHER=OFF; else OTHER=ON; fi
echo "== add_subdirectory, BUILD_SHARED_LIBS=$OTHER"
cmake -S "$CONSUMER" -B "$W/sub" "${CMAKE_ARGS[@]}" -DCHATTERBOX_SOURCE_DIR="$SRC" -DBUILD_SHARED_LIBS=$OTHER \
  > "$W/sub.log" 2>&1 || { cat "$W/sub.log"; fail "add_subdirectory configure"; }
grep -q "^GTest_DIR\|^HTTPLIB_FOUND" "$W/sub/CMakeCache.txt" &&
  fail "a sub-project build looked for GoogleTest or cpp-httplib (tests or tools on)"
cmake --build "$W/sub" > "$W/sub-build.log" 2>&1 || { tail -50 "$W/sub-build.log"; fail "add_subdirectory build"; }
"$W/sub/consumer" "$W/tiny.gguf" || fail "add_subdirectory consumer"
for t in chatterbox chatterbox-bench chatterbox-mkckpt; do
  [ -z "$(find "$W/sub" -type f -name "$t")" ] || fail "a sub-project build built the tool $t"
done
cmake --install "$W/sub" --prefix "$W/prefix-sub" > "$W/install-sub.log" || fail "cmake --install (sub-project)"
check_prefix "$W/prefix-sub" "$OTHER" no
consume_installed "$W/prefix-sub" installed-sub

rm -rf "$W"
echo "ok: installed package (shared=$SHARED) and add_subdirectory (shared=$OTHER) consumers"
