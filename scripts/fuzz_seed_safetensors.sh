#!/usr/bin/env bash
# Writes a few small valid safetensors files into a fuzz corpus directory (seeds for
# fuzz_safetensors), built with Python's json/struct from the published format, independently
# of our writer. Usage: scripts/fuzz_seed_safetensors.sh CORPUS_DIR
set -euo pipefail
dir=${1:?usage: $0 CORPUS_DIR}
mkdir -p "$dir"
/usr/bin/python3 - "$dir" <<'PY'
import json, os, struct, sys
out = sys.argv[1]
SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
def st(tensors, meta=None, pad=True):
    hdr, data = {}, b""
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dt, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        b = bytes((i * 7 + len(name)) & 0xff for i in range(n * SIZE[dt]))
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(hdr, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-(8 + len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + data
seeds = {
    "one": st([("w", "F32", [2, 3])]),
    "all_dtypes": st([(k.lower(), k, [2]) for k in SIZE], meta={"format": "pt"}),
    "scalar_empty": st([("s", "F16", []), ("e", "BF16", [0, 4]), ("v", "I64", [3])], pad=False),
    "nested_names": st([("enc.layers.0.w", "F32", [1, 2, 2]), ("enc.layers.0.b", "F32", [2])]),
    "empty": st([]),
}
for k, v in seeds.items():
    open(os.path.join(out, "seed_" + k), "wb").write(v)
PY
