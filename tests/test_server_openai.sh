#!/bin/bash
# `chatterbox serve` driven by the official `openai` npm package (issue 24's real client): mp3 and
# wav files, a streamed response read chunk by chunk, SSE, errors. The package is installed from
# tests/server_openai/package-lock.json into the build directory (npm ci). Skipped (77) only when
# node or npm is missing; a failing install is a failure.
# Usage: test_server_openai.sh BUILD_DIR
set -u
BUILD=${1:?usage: test_server_openai.sh BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-server-openai
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  echo "skip: node or npm not installed"
  exit 77
fi
SRC=$(cd "$(dirname "$0")" && pwd)/server_openai
NODE_DIR=$(cd "$BUILD" && pwd)/server_openai
mkdir -p "$NODE_DIR"
cp "$SRC/package.json" "$SRC/package-lock.json" "$SRC/client_test.mjs" "$NODE_DIR/"
if [ ! -f "$NODE_DIR/node_modules/openai/package.json" ] ||
   ! cmp -s "$SRC/package-lock.json" "$NODE_DIR/node_modules/.package-lock.json.src"; then
  (cd "$NODE_DIR" && npm ci --no-audit --no-fund > "$T/npm.log" 2>&1) || { cat "$T/npm.log"; fail "npm ci (the openai package)"; }
  cp "$SRC/package-lock.json" "$NODE_DIR/node_modules/.package-lock.json.src"
fi

"$MK" --variant turbo --size tiny --seed 2 --threads 1 "$T/ckpt" > /dev/null 2>&1 || fail "mkckpt turbo"
"$B" convert "$T/ckpt" -o "$T/m.gguf" --type f32 --quiet > /dev/null || fail "convert"
"$B" serve -m "$T/m.gguf" --host 127.0.0.1 --port 0 -t 2 --max-tokens 30 --api-key k3y > "$T/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2> /dev/null; wait $SERVER 2> /dev/null; rm -rf "$T"' EXIT
PORT=
for _ in $(seq 600); do
  PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/server.log" | grep -o '[0-9]*$')
  [ -n "$PORT" ] && break
  kill -0 $SERVER 2> /dev/null || { cat "$T/server.log"; fail "server exited"; }
  sleep 0.05
done
[ -n "$PORT" ] || fail "no port"
for _ in $(seq 1200); do
  curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break
  sleep 0.05
done
node "$NODE_DIR/client_test.mjs" "http://127.0.0.1:$PORT/v1" k3y "$T" || { cat "$T/server.log"; fail "openai client"; }
for f in mp3 wav; do
  out=$("$B" debug-frontend --kind decode --in "$T/client.$f" --out "$T/$f.npy") || fail "decode client.$f"
  echo "$out" | grep -q "sample_rate=24000 channels=1" || fail "client.$f: $out"
done
# The wav holds the streamed pcm's samples (same request, same seed).
cmp -s <(tail -c +45 "$T/client.wav") "$T/client.pcm" || fail "client.wav samples differ from the streamed pcm"
kill -TERM $SERVER
wait $SERVER || fail "server exit status $?"
echo "openai client test: ok"
