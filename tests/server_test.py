"""Integration test of `chatterbox serve` (run by tests/test_server.sh; stdlib only).

Starts the server on a free loopback port with a tiny Turbo model and checks every endpoint,
every response_format decoded back, SSE, streaming order, concurrency == sequential, client
disconnect, voices, auth, the queue limit, bad requests and graceful shutdown. Every wait is a
loop bounded in count; nothing asserts on wall-clock time.

usage: server_test.py CHATTERBOX MODEL.gguf MTL.gguf REF.wav SHORT.wav TMPDIR
"""
import atexit
import base64
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

CLI, MODEL, MTL, REF_WAV, SHORT_WAV, TMP = sys.argv[1:7]
HOST = "127.0.0.1"
TEXT = "Hello there. This is a short test."
# Many sentences: several text chunks, so the first audio goes out while later chunks generate.
LONG = " ".join(f"Sentence number {w} is spoken here, and it keeps going for a while longer." for w in
                ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"])


# Every server process this test starts: killed at exit, so a failed check (or an exception)
# leaves none running.
PROCS = []


@atexit.register
def kill_servers():
    for p in PROCS:
        if p.poll() is None:
            p.kill()
            p.wait()


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


class Server:
    def __init__(self, name, *args):
        self.log_path = os.path.join(TMP, name + ".log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([CLI, "serve", "-m", MODEL, "--host", HOST, "--port", "0", "-t", "2", "-v"] +
                                     list(args), stdout=self.log, stderr=self.log)
        PROCS.append(self.proc)
        self.port = None
        for _ in range(600):  # the port line comes before loading
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.text())
            if m:
                self.port = int(m.group(1))
                break
            check(self.proc.poll() is None, "server exited at start:\n" + self.text())
            time.sleep(0.05)
        check(self.port, "no 'listening on' line:\n" + self.text())
        for _ in range(1200):
            if self.request("GET", "/health")[0] == 200:
                break
            time.sleep(0.05)
        else:
            fail("never healthy:\n" + self.text())

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def wait_log(self, needle):
        # The access line of a request is written after its response is sent: wait for it
        # (bounded by a deadline, as wait_metric).
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if needle in self.text():
                return True
            time.sleep(0.02)
        return False

    def conn(self):
        return http.client.HTTPConnection(HOST, self.port, timeout=300)

    def request(self, method, path, body=None, headers=None):
        c = self.conn()
        hdrs = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            hdrs.setdefault("Content-Type", "application/json")
        c.request(method, path, body=body, headers=hdrs)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, dict(r.getheaders()), data

    def speech(self, body, headers=None):
        return self.request("POST", "/v1/audio/speech", body, headers)

    def metric(self, name):
        _, _, data = self.request("GET", "/metrics")
        m = re.search(r"^" + re.escape(name) + r" (\S+)$", data.decode(), re.M)
        return float(m.group(1)) if m else None

    def wait_metric(self, name, value):
        # Bounded by a deadline far above any step's time (ASan builds on a loaded machine are slow),
        # not by a count of polls, whose own time grows with the load.
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.metric(name) == value:
                return
            time.sleep(0.02)
        fail(f"{name} never became {value} (is {self.metric(name)}); server log:\n" + self.text()[-4000:])

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            fail("server did not stop after " + sig.name + ":\n" + self.text())
        self.log.close()
        return rc


def decode(path):
    """(sample_rate, channels, samples) of an audio file, read back with libsndfile."""
    out = subprocess.run([CLI, "debug-frontend", "--kind", "decode", "--in", path, "--out", path + ".npy"],
                         capture_output=True, text=True)
    check(out.returncode == 0, f"cannot decode {path}: {out.stderr}")
    m = re.search(r"sample_rate=(\d+) channels=(\d+) samples=(\d+)", out.stdout)
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def expect_error(srv, body, status, needle, param=None, headers=None, raw=None):
    st, hdrs, data = srv.request("POST", "/v1/audio/speech", raw if raw is not None else body,
                                 dict(headers or {}, **({"Content-Type": "application/json"} if raw is not None else {})))
    check(st == status, f"{body if raw is None else raw[:60]!r}: status {st}, expected {status}: {data[:300]!r}")
    err = json.loads(data)["error"]
    check(set(err) == {"message", "type", "param", "code"}, f"error shape: {err}")
    check(needle in err["message"], f"{needle!r} not in {err['message']!r}")
    if param is not None:
        check(err["param"] == param, f"param {err['param']!r}, expected {param!r}")
    return hdrs


def multipart(fields):
    """fields: list of (name, value bytes, filename or None) -> (body, content type)."""
    b = "cbxboundary7d1f"
    out = b""
    for name, value, filename in fields:
        out += f"--{b}\r\nContent-Disposition: form-data; name=\"{name}\"".encode()
        if filename:
            out += f"; filename=\"{filename}\"\r\nContent-Type: application/octet-stream".encode()
        out += b"\r\n\r\n" + value + b"\r\n"
    out += f"--{b}--\r\n".encode()
    return out, "multipart/form-data; boundary=" + b


def upload(srv, name, data, filename="ref.wav", headers=None):
    body, ctype = multipart([("name", name.encode(), None), ("file", data, filename)])
    return srv.request("POST", "/v1/audio/voices", body, dict(headers or {}, **{"Content-Type": ctype}))


def sse_events(data):
    events = []
    for block in data.decode().split("\n\n"):
        if not block.strip():
            continue
        check(block.startswith("data: "), f"not an SSE data event: {block[:80]!r}")
        events.append(json.loads(block[len("data: "):]))
    return events


def main():
    voices = os.path.join(TMP, "voices")
    os.makedirs(voices)
    srv = Server("main", "-m", MTL, "--voices", voices, "--max-tokens", "30", "--max-queue", "8", "--max-input-chars", "1000")

    # ---- the load progress -v logs (stderr is no terminal): rising percentages to 100% per model ----
    for path in (MODEL, MTL):
        pct = [int(p) for p in re.findall(r"^serve: loading " + re.escape(path) + r" (\d+)%$", srv.text(), re.M)]
        check(len(pct) >= 2 and pct == sorted(pct) and pct[-1] == 100, f"load progress of {path}: {pct}\n" + srv.text())
        # then the built-in voice's prefix, and one line with the whole time before the model serves
        log = srv.text()
        prep = log.find("serve: preparing the built-in voice of " + path + "\n")
        done = re.search(r"^serve: loaded " + re.escape(path) + r" as chatterbox-\S+ in \d+\.\d s \(voice prefix \d+ ms\)$",
                         log, re.M)
        check(prep >= 0 and done and prep < done.start(), f"voice preparation / loaded lines of {path}:\n" + log)

    # ---- plain endpoints ----
    st, _, data = srv.request("GET", "/health")
    check(st == 200 and json.loads(data)["status"] == "ok", f"/health: {st} {data!r}")
    st, _, data = srv.request("GET", "/v1/models")
    ids = [m["id"] for m in json.loads(data)["data"]]
    check(st == 200 and ids == ["chatterbox-turbo", "chatterbox-multilingual"], f"/v1/models: {st} {data!r}")
    st, _, data = srv.request("GET", "/v1/models/tts-1")
    check(st == 200 and json.loads(data)["id"] == "chatterbox-turbo", f"/v1/models/tts-1: {st} {data!r}")
    st, _, data = srv.request("GET", "/v1/audio/voices")
    check(st == 200 and "alloy" in [v["id"] for v in json.loads(data)["data"]], f"voices: {data!r}")
    st, _, data = srv.request("GET", "/nope")
    check(st == 404 and "no such endpoint" in json.loads(data)["error"]["message"], f"404: {st} {data!r}")

    # ---- every response_format, decoded back ----
    base = {"model": "tts-1", "input": TEXT, "voice": "alloy", "seed": 7}
    st, hdrs, pcm = srv.speech(dict(base, response_format="pcm"))
    check(st == 200 and hdrs.get("Content-Type") == "audio/pcm", f"pcm: {st} {hdrs}")
    check(hdrs.get("Transfer-Encoding") == "chunked", f"pcm is not chunked: {hdrs}")
    n = len(pcm) // 2
    check(n > 0 and len(pcm) % 2 == 0, f"pcm length {len(pcm)}")
    for fmt, mime in [("wav", "audio/wav"), ("flac", "audio/flac"), ("mp3", "audio/mpeg"),
                      ("opus", "audio/ogg; codecs=opus")]:
        st, hdrs, data = srv.speech(dict(base, response_format=fmt))
        check(st == 200 and hdrs.get("Content-Type") == mime, f"{fmt}: {st} {hdrs} {data[:200]!r}")
        path = os.path.join(TMP, "out." + fmt)
        with open(path, "wb") as f:
            f.write(data)
        sr, ch, m = decode(path)
        check(sr == 24000 and ch == 1, f"{fmt}: rate {sr}, channels {ch}")
        if fmt == "mp3":  # a streamed MP3 keeps the encoder delay and padding (audio_encode.h)
            check(0 <= m - n <= 2 * 1152 + 1105, f"mp3: {m} samples for {n}")
        else:
            check(m == n, f"{fmt}: {m} samples, expected {n}")
        if fmt == "wav":
            check(data[44:] == pcm, "wav samples differ from pcm")
            check(data[4:8] == b"\xff\xff\xff\xff", "streamed wav lacks the unknown-length header")
    # the default format is OpenAI's: mp3
    st, hdrs, _ = srv.speech({"input": TEXT, "seed": 7})
    check(st == 200 and hdrs.get("Content-Type") == "audio/mpeg", f"default format: {hdrs}")
    # speed: a pitch-keeping stretch of the whole request; the output length is exact
    st, _, fast = srv.speech(dict(base, response_format="pcm", speed=2.0))
    check(st == 200 and len(fast) // 2 == round(n / 2.0), f"speed 2: {len(fast) // 2} samples for {n}")
    st, _, slow = srv.speech(dict(base, response_format="wav", speed=0.5))
    path = os.path.join(TMP, "slow.wav")
    with open(path, "wb") as f:
        f.write(slow)
    check(st == 200 and decode(path) == (24000, 1, n * 2), f"speed 0.5: {decode(path)} for {n}")
    # instructions are accepted and ignored; voice "default" and OpenAI voice names are the built-in voice
    st, _, same = srv.speech(dict(base, response_format="pcm", instructions="Speak cheerfully.", voice="echo"))
    check(st == 200 and same == pcm, "instructions / another OpenAI voice changed the audio")

    # the Multilingual model: by id, with a language (default en), decoded back
    st, _, data = srv.speech({"model": "chatterbox-multilingual", "input": "Bonjour tout le monde.", "language": "FR",
                              "response_format": "wav"})
    path = os.path.join(TMP, "mtl.wav")
    with open(path, "wb") as f:
        f.write(data)
    check(st == 200 and decode(path)[:2] == (24000, 1), f"multilingual: {st} {data[:200]!r}")
    st, _, _ = srv.speech({"model": "chatterbox-multilingual", "input": "Hello.", "response_format": "pcm"})
    check(st == 200, f"multilingual without a language: {st}")
    expect_error(srv, {"model": "chatterbox-multilingual", "input": "Hi", "language": "xx"}, 400,
                 "language (--lang): 'xx' is not supported by this model", "language")

    # ---- SSE ----
    st, hdrs, data = srv.speech(dict(base, response_format="pcm", stream_format="sse"))
    check(st == 200 and hdrs.get("Content-Type", "").startswith("text/event-stream"), f"sse: {st} {hdrs}")
    ev = sse_events(data)
    check(len(ev) >= 2 and all(e["type"] == "speech.audio.delta" for e in ev[:-1]), f"sse events: {[e['type'] for e in ev]}")
    check(ev[-1]["type"] == "speech.audio.done" and ev[-1]["usage"]["output_tokens"] > 0, f"sse done: {ev[-1]}")
    check(b"".join(base64.b64decode(e["audio"]) for e in ev[:-1]) == pcm, "sse audio differs from the pcm stream")

    # ---- token-chunked streaming (default; --no-stream-synthesis turns it off) ----
    # A request of one text chunk, decoded past the first piece's 25 speech tokens, comes in more
    # than one audio piece: one SSE delta per piece (pcm, speed 1), in order, then done; their
    # bytes are the same request's pcm. Here (--max-tokens 30) Turbo; the tiny Multilingual model
    # stops before 25 tokens at that limit: both on servers with --max-tokens 80 below, one of
    # them with --no-stream-synthesis (one delta per chunk). The one-at-a-time path: srv2 below.
    one = {"input": "Hello.", "response_format": "pcm", "stream_format": "sse", "seed": 5}

    def pieces(server, body):
        st, _, data = server.speech(body)
        ev = sse_events(data)
        deltas = [e for e in ev if e["type"] == "speech.audio.delta"]
        check(st == 200 and ev[-1]["type"] == "speech.audio.done" and ev[:-1] == deltas,
              f"sse: {st} {[e['type'] for e in ev]}")
        st, _, plain = server.speech(dict(body, stream_format="audio"))
        check(st == 200 and b"".join(base64.b64decode(e["audio"]) for e in deltas) == plain,
              "the streamed pieces differ from the same request's pcm")
        return len(deltas), ev[-1]["usage"]["output_tokens"]

    n, tokens = pieces(srv, one)
    check(n >= 2, f"a one-chunk request of {tokens} speech tokens came in {n} piece(s)")
    for flags, streamed in [([], True), (["--no-stream-synthesis"], False)]:
        srv3 = Server("tokens80" + "".join(flags), "-m", MTL, "--max-tokens", "80", *flags)
        for body in [one, dict(one, model="chatterbox-multilingual")]:
            n, tokens = pieces(srv3, body)
            check(tokens > 25, f"{tokens} speech tokens: too few to test streaming")
            check(n >= 2 if streamed else n == 1,
                  f"{flags} {body.get('model', 'tts-1')}: a one-chunk request of {tokens} tokens came in {n} piece(s)")
        check(srv3.stop(signal.SIGTERM) == 0, f"{flags} server: exit status not 0")

    # ---- streaming: the first audio goes out before generation ends (order of the server's events) ----
    long_body = {"input": LONG, "response_format": "pcm", "seed": 11}
    st, _, long_pcm = srv.speech(long_body)
    check(st == 200 and len(long_pcm) > 0, f"long: {st}")
    log = srv.text()
    rid = re.findall(r"request (\d+): queued \(%d characters" % len(LONG), log)[-1]
    first = log.find(f"request {rid}: first audio sent")
    finished = log.find(f"request {rid}: generation finished")
    check(0 <= first < finished, f"request {rid}: first audio at {first}, generation finished at {finished}:\n{log}")
    check(len(re.findall(f"request {rid}: first audio sent", log)) == 1, "first audio logged twice")

    # ---- 8 concurrent requests with seeds == the same requests one at a time ----
    bodies = [{"input": f"Request {i} says hello. It has two sentences.", "response_format": "pcm", "seed": 100 + i}
              for i in range(8)]
    alone = [srv.speech(b) for b in bodies]
    check(all(a[0] == 200 for a in alone), "sequential requests failed")
    together = [None] * 8

    def run(i):
        together[i] = srv.speech(bodies[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    for i in range(8):
        check(together[i] is not None and together[i][0] == 200, f"concurrent request {i}: {together[i] and together[i][0]}")
        check(together[i][2] == alone[i][2], f"concurrent request {i} differs from the same request alone")
    check(len(set(a[2] for a in alone)) == 8, "different seeds gave the same audio")

    # ---- the same for the Multilingual model (batched as CFG pairs; cfg_weight 0: one row) ----
    langs = ["en", "fr", "de", "en", "es"]
    mbodies = [{"model": "chatterbox-multilingual", "input": f"Request {i} says hello. It has two sentences.",
                "language": langs[i], "response_format": "pcm", "seed": 200 + i,
                "cfg_weight": [0.5, 0.0, 1.0, 0.3, 0.0][i], "exaggeration": [0.5, 0.3, 0.9, 0.5, 0.7][i]}
               for i in range(5)]
    batched0 = srv.text().count("generation started (batched)")
    malone = [srv.speech(b) for b in mbodies]
    check(all(a[0] == 200 for a in malone), f"sequential multilingual requests failed: {[a[0] for a in malone]}")
    mtogether = [None] * 5

    def mrun(i):
        mtogether[i] = srv.speech(mbodies[i])

    threads = [threading.Thread(target=mrun, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    for i in range(5):
        check(mtogether[i] is not None and mtogether[i][0] == 200,
              f"concurrent multilingual request {i}: {mtogether[i] and mtogether[i][0]}")
        check(mtogether[i][2] == malone[i][2], f"concurrent multilingual request {i} differs from the same request alone")
    check(len(set(a[2] for a in malone)) == 5, "different multilingual seeds gave the same audio")
    check(srv.text().count("generation started (batched)") - batched0 == 10, "the multilingual requests were not batched")

    # ---- a client that disconnects mid-stream cancels its request; the next one is served ----
    cancelled0 = srv.metric("chatterbox_cancelled_total")
    s = socket.create_connection((HOST, srv.port), timeout=120)
    body = json.dumps(long_body).encode()
    s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while b"\r\n\r\n" not in got or len(got) < got.find(b"\r\n\r\n") + 100:
        chunk = s.recv(4096)
        check(chunk, "connection closed before audio")
        got += chunk
    check(got.startswith(b"HTTP/1.1 200"), f"disconnect request: {got[:100]!r}")
    s.close()
    srv.wait_metric("chatterbox_cancelled_total", cancelled0 + 1)
    srv.wait_metric("chatterbox_active_requests", 0)
    check("client gone, cancelling" in srv.text() or "client closed the connection" in srv.text(), "no cancel logged")
    st, _, again = srv.speech(long_body)
    check(st == 200 and again == long_pcm, "the request after a disconnect differs from the same request before")

    # ---- voices: upload -> list -> use -> delete ----
    with open(REF_WAV, "rb") as f:
        ref = f.read()
    st, _, data = upload(srv, "narrator", ref)
    check(st == 201 and json.loads(data)["name"] == "narrator", f"upload: {st} {data!r}")
    check(os.path.isfile(os.path.join(voices, "narrator.voice")), "narrator.voice not written")
    check(not [f for f in os.listdir(voices) if ".tmp-" in f], f"temporary files left: {os.listdir(voices)}")
    st, _, data = srv.request("GET", "/v1/audio/voices")
    listed = {v["id"]: v for v in json.loads(data)["data"]}
    check("narrator" in listed and listed["narrator"]["variant"] == "turbo" and not listed["narrator"]["builtin"],
          f"list after upload: {data!r}")
    st, _, cloned = srv.speech(dict(base, response_format="pcm", voice="narrator"))
    check(st == 200 and len(cloned) > 0 and cloned != pcm, f"speech with the uploaded voice: {st}")
    # a Turbo voice on the Multilingual model: refused before any audio, with a real status
    st, _, data = srv.speech({"model": "chatterbox-multilingual", "input": TEXT, "voice": "narrator"})
    check(st == 400 and "voice" in json.loads(data)["error"]["message"], f"turbo voice on mtl: {st} {data!r}")
    st, _, data = upload(srv, "narrator", ref)
    check(st == 409, f"duplicate upload: {st} {data!r}")
    # a saved voice named like an OpenAI voice replaces it
    st, _, _ = upload(srv, "nova", ref)
    check(st == 201, "upload nova")
    st, _, nova = srv.speech(dict(base, response_format="pcm", voice="nova"))
    check(st == 200 and nova == cloned, "a saved 'nova' is not used for voice 'nova'")
    for name in ["narrator", "nova"]:
        st, _, data = srv.request("DELETE", "/v1/audio/voices/" + name)
        check(st == 200 and json.loads(data)["deleted"], f"delete {name}: {st} {data!r}")
    st, _, data = srv.request("DELETE", "/v1/audio/voices/narrator")
    check(st == 404, f"delete twice: {st}")
    st, _, data = srv.request("GET", "/v1/audio/voices")
    check("narrator" not in [v["id"] for v in json.loads(data)["data"]], "narrator still listed")
    expect_error(srv, dict(base, voice="narrator"), 400, "voice 'narrator' does not exist; voices: default, alloy", "voice")
    st, _, data = upload(srv, "junk", b"this is not audio at all " * 100, "junk.wav")
    check(st == 400 and "cannot make a voice" in json.loads(data)["error"]["message"], f"not audio: {st} {data!r}")
    with open(SHORT_WAV, "rb") as f:
        st, _, data = upload(srv, "short", f.read())
    check(st == 400 and "needs more than 5.0 s" in json.loads(data)["error"]["message"], f"too short: {st} {data!r}")
    for bad in ["../evil", "a/b", ".hidden", "x" * 65]:
        st, _, data = upload(srv, bad, ref)
        check(st == 400 and json.loads(data)["error"]["param"] == "name", f"name {bad!r}: {st} {data!r}")
    # a name that is not UTF-8 is quoted in the message: 400 with a JSON body, not a 500 (issue 32)
    body, ctype = multipart([("name", b"bad\xff\xfe", None), ("file", ref, "ref.wav")])
    st, _, data = srv.request("POST", "/v1/audio/voices", body, {"Content-Type": ctype})
    check(st == 400 and json.loads(data)["error"]["param"] == "name", f"name not UTF-8: {st} {data!r}")
    st, _, data = srv.request("DELETE", "/v1/audio/voices/bad%FF")
    check(st == 400 and json.loads(data)["error"]["code"] == "invalid_name", f"delete, name not UTF-8: {st} {data!r}")
    check(srv.wait_log("DELETE /v1/audio/voices/bad\\xff 400"), "the log does not escape a path that is not UTF-8")
    st, _, data = srv.request("DELETE", "/v1/audio/voices/..%2Fmain.log")
    check(st in (400, 404), f"delete ../: {st} {data!r}")
    check(os.path.isfile(srv.log_path), "a path outside the voices directory was deleted")
    check(sorted(os.listdir(voices)) == [], f"voices dir not empty: {os.listdir(voices)}")

    # ---- bad requests ----
    # a number beyond a double is bad JSON (400), not an internal error (issue 32, fuzz_request_speech)
    expect_error(srv, None, 400, "number overflow", raw='{"input":"x","speed":1e309}')
    expect_error(srv, None, 400, "not valid JSON", raw=b'{"input": "Hi"')
    expect_error(srv, None, 400, "must be a JSON object", raw=b'["Hi"]')
    expect_error(srv, None, 400, "not valid UTF-8", "input", raw=b'{"input": "caf\xe9"}')
    expect_error(srv, {"input": 5}, 400, "'input' must be a string, got number", "input")
    expect_error(srv, {"input": "Hi", "temperature": "hot"}, 400, "'temperature' must be a number, got string", "temperature")
    expect_error(srv, {"input": "Hi", "top_k": 1.5}, 400, "'top_k' must be an integer", "top_k")
    # a float far outside int64 (the fuzzer found the unchecked conversion): a type error, not UB
    expect_error(srv, {"input": "Hi", "top_k": 1e30}, 400, "'top_k' must be an integer", "top_k")
    expect_error(srv, {"input": "Hi", "seed": -1}, 400, "'seed' must be an integer from 0", "seed")
    expect_error(srv, {"model": "tts-1"}, 400, "missing 'input'", "input")
    expect_error(srv, {"input": ""}, 400, "'input' is empty", "input")
    expect_error(srv, {"input": " \t\n\u3000 "}, 400, "'input' is empty", "input")
    expect_error(srv, {"input": "a" * 1001}, 400, "'input' has 1001 characters; the limit is 1000", "input")
    expect_error(srv, {"input": "Hi", "model": "gpt-5"}, 400, "model 'gpt-5' does not exist; available: chatterbox-turbo", "model")
    expect_error(srv, {"input": "Hi", "voice": "bob"}, 400, "voice 'bob' does not exist", "voice")
    expect_error(srv, {"input": "Hi", "response_format": "ogg"}, 400, "response_format 'ogg' is not supported", "response_format")
    expect_error(srv, {"input": "Hi", "response_format": "aac"}, 400, "no AAC encoder", "response_format")
    expect_error(srv, {"input": "Hi", "stream_format": "ws"}, 400, "stream_format 'ws'", "stream_format")
    expect_error(srv, {"input": "Hi", "language": "fr"}, 400, "English only", "language")
    expect_error(srv, {"input": "Hi", "speed": 5}, 400, "speed must be in [0.25, 4], got 5", "speed")
    expect_error(srv, {"input": "Hi", "speed": 0.1}, 400, "speed must be in [0.25, 4], got 0.1", "speed")
    # the same message as the CLI and the C API for a sampling value out of range
    expect_error(srv, {"input": "Hi", "temperature": -1}, 400, "temperature (--temperature) must be in (0, 10], got -1", "temperature")
    expect_error(srv, {"input": "Hi", "top_p": 1.5}, 400, "top_p (--top-p) must be in (0, 1], got 1.5", "top_p")
    expect_error(srv, {"input": "Hi", "top_k": -3}, 400, "top_k (--top-k) must be in [0, 100000], got -3", "top_k")
    expect_error(srv, {"input": "Hi", "exaggeration": 1000}, 400, "exaggeration (--exaggeration) must be in [0, 100]", "exaggeration")
    expect_error(srv, None, 413, "the request body is", raw=json.dumps({"input": "Hi", "pad": "x" * (2 << 20)}).encode())
    st, _, _ = srv.speech(dict(base, response_format="pcm"))
    check(st == 200, "a good request after the bad ones failed")
    check(srv.request("GET", "/health")[0] == 200, "unhealthy after the bad requests")

    # ---- metrics ----
    # A response can end before the engine thread has counted its request out: wait for that
    # (bounded), then read the whole page.
    srv.wait_metric("chatterbox_active_requests", 0)
    srv.wait_metric("chatterbox_queue_depth", 0)
    _, hdrs, data = srv.request("GET", "/metrics")
    text = data.decode()
    check(hdrs.get("Content-Type", "").startswith("text/plain"), f"metrics type {hdrs}")
    for needle in ['chatterbox_requests_total{endpoint="/v1/audio/speech",status="200"}',
                   'chatterbox_requests_total{endpoint="/v1/audio/speech",status="400"}',
                   "chatterbox_queue_depth 0", "chatterbox_active_requests 0",
                   'chatterbox_time_to_first_audio_seconds_bucket{le="+Inf"}', "chatterbox_request_duration_seconds_count"]:
        check(needle in text, f"{needle!r} not in /metrics")
    check(srv.metric("chatterbox_speech_tokens_total") > 0 and srv.metric("chatterbox_audio_seconds_total") > 0,
          "no tokens / audio counted")
    # The batched engine's time by stage: decode steps and S3Gen runs (streaming is the default).
    check(srv.metric('chatterbox_engine_runs_total{stage="decode"}') > 0, "no decode steps counted")
    check(srv.metric('chatterbox_engine_runs_total{stage="s3gen_final"}') > 0, "no final S3Gen runs counted")
    for stage in ["decode", "s3gen_stream", "s3gen_final", "s3gen_chunk", "flow", "cfm", "hift"]:
        v = srv.metric(f'chatterbox_engine_seconds_total{{stage="{stage}"}}')
        check(v is not None and v >= 0, f"engine seconds of stage {stage}: {v}")
    check(srv.metric('chatterbox_engine_seconds_total{stage="cfm"}') > 0, "no CFM time counted")
    check(srv.stop(signal.SIGINT) == 0, "SIGINT: exit status not 0")
    check("stopped" in srv.text(), "no 'stopped' line after SIGINT")

    # ---- auth, queue full, graceful shutdown: a server with a key and a queue of 1 ----
    # --max-batch 1: one request runs, one waits, the third is refused -- an order of events that
    # does not depend on when the batching engine admits a queued request into a free row.
    key_file = os.path.join(TMP, "key")
    with open(key_file, "w") as f:
        f.write("s3cret\n")
    srv2 = Server("auth", "--api-key-file", key_file, "--max-queue", "1", "--grace", "1", "--max-batch", "1")
    good = {"Authorization": "Bearer s3cret"}
    st, _, _ = srv2.request("GET", "/health")
    check(st == 200, "/health needs no key")
    expect_error(srv2, {"input": "Hi"}, 401, "missing API key")
    expect_error(srv2, {"input": "Hi"}, 401, "incorrect API key", headers={"Authorization": "Bearer wrong"})
    st, _, data = srv2.request("GET", "/v1/models", headers={"Authorization": "Bearer s3cre"})
    check(st == 401, f"/v1/models with a wrong key: {st}")
    st, _, data = srv2.speech(dict(base, response_format="pcm"), good)
    check(st == 200 and len(data) > 0, f"with the key: {st}")
    st, _, data = srv2.speech({"input": "Hello.", "response_format": "pcm", "stream_format": "sse", "seed": 5}, good)
    deltas = [e for e in sse_events(data) if e["type"] == "speech.audio.delta"]
    check(st == 200 and len(deltas) >= 2, f"--max-batch 1: a one-chunk request came in {len(deltas)} piece(s)")
    # A: running (no --max-tokens here: the tiny model's chunks run to the model's 1000 tokens, and
    # 30 of them keep it running long after B and C; SIGTERM cancels it); B: queued; C: refused with
    # 429 + Retry-After. The previous request's task may still be counted as active for a moment
    # after its response ended: wait for it to leave first, and for A to have left the queue.
    srv2.wait_metric("chatterbox_active_requests", 0)
    a = socket.create_connection((HOST, srv2.port), timeout=120)
    body = json.dumps({"input": " ".join([LONG] * 3), "response_format": "pcm"}).encode()
    a.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    srv2.wait_metric("chatterbox_active_requests", 1)
    srv2.wait_metric("chatterbox_queue_depth", 0)
    b_result = []
    bt = threading.Thread(target=lambda: b_result.append(srv2.speech({"input": TEXT, "response_format": "pcm"}, good)))
    bt.start()
    srv2.wait_metric("chatterbox_queue_depth", 1)
    hdrs = expect_error(srv2, {"input": TEXT}, 429, "queue is full (--max-queue 1)", headers=good)
    check(int(hdrs.get("Retry-After", "0")) >= 1, f"429 without Retry-After: {hdrs}")
    # SIGTERM now: B (queued) gets 503, A (running) is cancelled after --grace 1, exit status 0.
    rc = srv2.stop(signal.SIGTERM)
    bt.join(timeout=120)
    check(rc == 0, f"SIGTERM: exit status {rc}:\n{srv2.text()}")
    check(b_result and b_result[0][0] == 503, f"queued request at shutdown: {b_result and b_result[0][:1]}")
    check("shutting down" in json.loads(b_result[0][2])["error"]["message"], "503 message")
    a.close()
    log = srv2.text()
    check("generation cancelled (the server is shutting down)" in log, "running request not cancelled at shutdown:\n" + log)
    check("stopped" in log, "no 'stopped' line after SIGTERM")
    try:
        socket.create_connection((HOST, srv2.port), timeout=5).close()
        fail("still accepting connections after shutdown")
    except OSError:
        pass

    # ---- a model that fails to load, while a client polls /health on one keep-alive connection ----
    # The server must still exit (status 1, the load error logged): its answers close the
    # connection once it is stopping, so the poller cannot hold the shutdown open.
    broken = os.path.join(TMP, "broken.gguf")
    with open(broken, "wb") as f:
        f.write(b"GGUF" + b"\0" * 60)
    blog_path = os.path.join(TMP, "broken.log")
    with open(blog_path, "w") as blog:
        bproc = subprocess.Popen([CLI, "serve", "-m", broken, "--host", HOST, "--port", "0"], stdout=blog, stderr=blog)
        PROCS.append(bproc)
        bport = None
        for _ in range(600):
            with open(blog_path) as f:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
            if m or bproc.poll() is not None:
                bport = int(m.group(1)) if m else None
                break
            time.sleep(0.02)
        polls = 0
        c = http.client.HTTPConnection(HOST, bport, timeout=5) if bport else None
        while c and bproc.poll() is None and polls < 2000:  # bounded: at most ~2000 polls
            polls += 1
            try:
                c.request("GET", "/health")
                c.getresponse().read()
            except (OSError, http.client.HTTPException):
                c.close()
                c = http.client.HTTPConnection(HOST, bport, timeout=5)
            time.sleep(0.02)
        if c:
            c.close()
        try:
            brc = bproc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            bproc.kill()
            bproc.wait()
            fail("a server whose model failed to load did not exit while /health was polled")
    with open(blog_path) as f:
        btext = f.read()
    check(brc == 1, f"failed load: exit status {brc}:\n{btext}")
    check("error" in btext and "broken.gguf" in btext, "failed load: no error naming the file:\n" + btext)
    print("server test: ok")


main()
