#!/usr/bin/env bash
# Writes voice uploads into a fuzz corpus directory (seeds for fuzz_audio_upload): each file is
# the multipart boundary, a newline, then a multipart/form-data body with the fields name, file
# (or audio_sample) and model, holding small WAV files (Python's wave module) and, when sox is
# installed, FLAC, Ogg/Vorbis and MP3 ones. Some are long enough (at a low sample rate) to pass
# the length checks and reach the front-ends. Usage: scripts/fuzz_seed_audio_upload.sh CORPUS_DIR
set -euo pipefail
dir=${1:?usage: $0 CORPUS_DIR}
mkdir -p "$dir"
/usr/bin/python3 - "$dir" <<'PY'
import io, math, os, random, shutil, struct, subprocess, sys, tempfile, wave
out = sys.argv[1]
rnd = random.Random(1)

def wav(rate, seconds, width=2, channels=1):
    n = max(1, int(rate * seconds))
    b = io.BytesIO()
    with wave.open(b, "wb") as w:
        w.setnchannels(channels); w.setsampwidth(width); w.setframerate(rate)
        frames = bytearray()
        for i in range(n):
            v = 0.5 * math.sin(2 * math.pi * 220 * i / rate) + 0.1 * (rnd.random() - 0.5)
            for _ in range(channels):
                if width == 1:
                    frames.append(int(128 + 127 * v) & 0xFF)
                else:
                    frames += struct.pack("<h", int(32767 * v))
        w.writeframes(bytes(frames))
    return b.getvalue()

def multipart(boundary, fields):
    body = b""
    for name, filename, ctype, data in fields:
        disp = b'Content-Disposition: form-data; name="' + name.encode() + b'"'
        if filename is not None:
            disp += b'; filename="' + filename.encode() + b'"'
        body += b"--" + boundary + b"\r\n" + disp + b"\r\n"
        if ctype:
            body += b"Content-Type: " + ctype.encode() + b"\r\n"
        body += b"\r\n" + data + b"\r\n"
    body += b"--" + boundary + b"--\r\n"
    return boundary + b"\n" + body

B = b"cbxboundary"
seeds = {
    "short_wav": multipart(B, [("name", None, None, b"alice"), ("file", "a.wav", "audio/wav", wav(8000, 0.05))]),
    "long_lowrate_wav": multipart(B, [("name", None, None, b"bob"), ("file", "b.wav", "audio/wav", wav(1000, 5.3, 1)),
                                       ("model", None, None, b"chatterbox-turbo")]),
    "mtl_stereo_wav": multipart(B, [("model", None, None, b"chatterbox-multilingual"), ("name", None, None, b"c.1"),
                                     ("audio_sample", "c.wav", "audio/wav", wav(2000, 1.2, 2, 2))]),
    "bad_name": multipart(B, [("name", None, None, b"../etc"), ("file", "d.wav", None, wav(16000, 0.01))]),
    "no_file": multipart(b"x", [("name", None, None, b"e")]),
    "empty_file": multipart(B, [("name", None, None, b"f"), ("file", "f.wav", None, b"")]),
}
sox = shutil.which("sox")
if sox:
    with tempfile.TemporaryDirectory() as t:
        src = os.path.join(t, "in.wav")
        open(src, "wb").write(wav(4000, 1.5))
        for ext in ("flac", "ogg", "mp3"):
            dst = os.path.join(t, "out." + ext)
            if subprocess.run([sox, src, dst], capture_output=True).returncode == 0 and os.path.exists(dst):
                seeds["sox_" + ext] = multipart(B, [("name", None, None, b"g"), ("model", None, None, b"chatterbox-multilingual"),
                                                     ("file", "g." + ext, None, open(dst, "rb").read())])
for k, v in seeds.items():
    open(os.path.join(out, "seed_" + k), "wb").write(v)
PY
