#!/usr/bin/env bash
# Writes inputs for fuzz_audio_roundtrip into a fuzz corpus directory: 4 bytes sample rate
# (little-endian), 1 byte chunk length - 1, then float32 samples (speech-like values, full scale,
# NaN, infinities, denormals). Usage: scripts/fuzz_seed_audio_roundtrip.sh CORPUS_DIR
set -euo pipefail
dir=${1:?usage: $0 CORPUS_DIR}
mkdir -p "$dir"
/usr/bin/python3 - "$dir" <<'PY'
import math, os, struct, sys
out = sys.argv[1]
def seed(name, rate, chunk, xs):
    open(os.path.join(out, "seed_" + name), "wb").write(struct.pack("<IB", rate, chunk) + struct.pack("<%df" % len(xs), *xs))
seed("speech24k", 24000, 63, [0.3 * math.sin(i / 5) for i in range(200)])
seed("edges", 24000, 0, [1.0, -1.0, 2.0, -2.0, float("nan"), float("inf"), -float("inf"), 1e-45, -0.0, 0.99999, -1.00001])
seed("rate8k", 8000, 255, [0.1] * 33)
seed("rate192k", 192000, 7, [(-1) ** i * 0.5 for i in range(50)])
seed("one", 1, 0, [0.25])
PY
