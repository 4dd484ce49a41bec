#!/bin/bash
# The web page of `chatterbox serve` (GET /, issue 30) in a real browser: headless Chromium (Debian's
# `chromium`) driven by tests/server_webui/browser_test.mjs with puppeteer-core (pinned in
# tests/server_webui/package-lock.json, installed with `npm ci` into the build directory). A tiny
# model on a free loopback port; the browser may reach nothing else. Also checks --no-ui.
# Skipped (77) only when Chromium cannot start (or node/npm are missing); a failing install fails.
# Usage: test_server_webui.sh BUILD_DIR
set -u
BUILD=${1:?usage: test_server_webui.sh BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-server-webui
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  echo "skip: node or npm not installed"
  exit 77
fi
CHROMIUM=${CBX_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$CHROMIUM" ]; then
  echo "skip: no chromium (scripts/setup.sh installs it)"
  exit 77
fi
SRC=$(cd "$(dirname "$0")" && pwd)/server_webui
NODE_DIR=$(cd "$BUILD" && pwd)/server_webui
mkdir -p "$NODE_DIR"
cp "$SRC/package.json" "$SRC/package-lock.json" "$SRC/browser_test.mjs" "$NODE_DIR/"
if [ ! -f "$NODE_DIR/node_modules/puppeteer-core/package.json" ] ||
   ! cmp -s "$SRC/package-lock.json" "$NODE_DIR/node_modules/.package-lock.json.src"; then
  (cd "$NODE_DIR" && npm ci --no-audit --no-fund > "$T/npm.log" 2>&1) || { cat "$T/npm.log"; fail "npm ci (puppeteer-core)"; }
  cp "$SRC/package-lock.json" "$NODE_DIR/node_modules/.package-lock.json.src"
fi

"$MK" --variant turbo --size tiny --seed 2 --threads 1 "$T/ckpt" > /dev/null 2>&1 || fail "mkckpt turbo"
"$B" convert "$T/ckpt" -o "$T/m.gguf" --type f32 --quiet > /dev/null || fail "convert"
espeak-ng -w "$T/ref.wav" "The quick brown fox jumps over the lazy dog, and then it runs far away. It stops by the river, drinks some water and sleeps in the warm sun." 2> /dev/null ||
  sox -n -r 22050 -c 1 "$T/ref.wav" synth 8 sine 220 vol 0.5 || fail "no reference audio"
mkdir "$T/voices"

SERVER=
trap '[ -n "$SERVER" ] && kill $SERVER 2> /dev/null; wait 2> /dev/null; rm -rf "$T"' EXIT
# start_server LOG ARGS...: starts the server on a free loopback port; sets SERVER and PORT.
start_server() {
  local log=$1
  shift
  "$B" serve -m "$T/m.gguf" --host 127.0.0.1 --port 0 -t 2 --max-tokens 30 "$@" > "$log" 2>&1 &
  SERVER=$!
  PORT=
  for _ in $(seq 600); do
    PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$')
    [ -n "$PORT" ] && break
    kill -0 $SERVER 2> /dev/null || { cat "$log"; fail "server exited"; }
    sleep 0.05
  done
  [ -n "$PORT" ] || fail "no port"
  for _ in $(seq 1200); do
    curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && return
    sleep 0.05
  done
  fail "the server did not become ready"
}
stop_server() {
  kill -TERM $SERVER
  wait $SERVER || fail "server exit status $?"
  SERVER=
}

# --no-ui: GET / is an unknown endpoint (404 in the API's error shape); the API still answers.
start_server "$T/noui.log" --no-ui
code=$(curl -s -o "$T/noui.json" -w '%{http_code}' "http://127.0.0.1:$PORT/")
[ "$code" = 404 ] && grep -q '"message":"no such endpoint: GET /"' "$T/noui.json" || fail "--no-ui: GET / gave $code $(cat "$T/noui.json")"
curl -sf "http://127.0.0.1:$PORT/v1/limits" | grep -q '"max_input_chars":4096' || fail "--no-ui: /v1/limits"
grep -q "web page" "$T/noui.log" && fail "--no-ui still announces the web page"
stop_server

start_server "$T/server.log" --voices "$T/voices"
grep -q "web page: http://127.0.0.1:$PORT/" "$T/server.log" || fail "the web page's address is not printed"
curl -s -D "$T/h.txt" -o "$T/page.html" "http://127.0.0.1:$PORT/" || fail "GET /"
grep -qi '^content-type: text/html' "$T/h.txt" || fail "GET /: $(cat "$T/h.txt")"
grep -qi "^content-security-policy: default-src 'none'" "$T/h.txt" || fail "GET / without its Content-Security-Policy"
cmp -s "$T/page.html" "$(dirname "$0")/../tools/server/ui/index.html" || fail "GET / differs from tools/server/ui/index.html"
# The page is self-contained: no URL to anywhere but this server.
grep -Eo '(src|href)="[a-z]+://[^"]*"' "$T/page.html" && fail "the page refers to another origin"

node "$NODE_DIR/browser_test.mjs" "http://127.0.0.1:$PORT" "$CHROMIUM" "$T/ref.wav" "$BUILD/server_webui/shots"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { tail -30 "$T/server.log"; fail "browser test (screenshots in $BUILD/server_webui/shots)"; }
[ -z "$(ls -A "$T/voices")" ] || fail "voices left behind: $(ls "$T/voices")"
stop_server
echo "web page test: ok (screenshots in $BUILD/server_webui/shots)"
