#!/usr/bin/env bash
# Writes a few small valid GGUF files into a fuzz corpus directory (seeds for fuzz_gguf).
# The files are built here from the published GGUF layout with Python's struct module,
# independently of our writer. Usage: scripts/fuzz_seed_gguf.sh CORPUS_DIR
set -euo pipefail
dir=${1:?usage: $0 CORPUS_DIR}
mkdir -p "$dir"
/usr/bin/python3 - "$dir" <<'PY'
import os, struct, sys

out = sys.argv[1]
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
       BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}

def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b

def val(t, v):
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(val(et, x) for x in items)
    return struct.pack(FMT[t], v)

def gguf(kvs, tensors, version=3, align=32):
    # tensors: (name, dims innermost-first, ggml type id, data bytes)
    body = b"".join(s(k) + struct.pack("<I", t) + val(t, v) for k, t, v in kvs)
    infos, data = b"", b""
    for name, dims, typ, blob in tensors:
        infos += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", typ, len(data))
        data += blob + b"\0" * ((-len(blob)) % align)
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + body + infos
    return head + b"\0" * ((-len(head)) % align) + data

def write(name, b):
    with open(os.path.join(out, name), "wb") as f:
        f.write(b)

f32 = struct.pack("<8f", *range(8))
f16 = struct.pack("<4H", 0x3c00, 0x4000, 0xbc00, 0)
bf16 = struct.pack("<4H", 0x3f80, 0x4000, 0xbf80, 0)
q8_0 = struct.pack("<H", 0x3c00) + bytes(range(32))
q4_0 = struct.pack("<H", 0x3c00) + bytes(range(16))
i32 = struct.pack("<3i", 1, -2, 3)

write("all_types.gguf", gguf(
    [("general.architecture", STR, "chatterbox"), ("u8", U8, 7), ("i8", I8, -7), ("u16", U16, 700),
     ("i16", I16, -700), ("u32", U32, 70000), ("i32", I32, -70000), ("f32", F32, 0.5),
     ("bool", BOOL, True), ("u64", U64, 2**40), ("i64", I64, -2**40), ("f64", F64, 0.25),
     ("tokens", ARR, (STR, ["<s>", "</s>", "a"])), ("ids", ARR, (I32, [1, 2, 3])),
     ("nested", ARR, (ARR, [(U8, [1, 2]), (F32, [1.5])]))],
    [("blk.0.w", [4, 2], 0, f32), ("f16", [4], 1, f16), ("bf16", [2, 2], 30, bf16),
     ("q8", [32], 8, q8_0), ("q4", [32, 1], 2, q4_0), ("i32", [3], 26, i32)]))
write("aligned_64_v2.gguf", gguf(
    [("general.alignment", U32, 64), ("name", STR, "x")],
    [("a", [8], 0, f32), ("b", [4, 1, 1, 1], 1, f16)], version=2, align=64))
write("empty.gguf", gguf([], []))
write("metadata_only.gguf", gguf([("k", ARR, (ARR, [(STR, ["x"]), (BOOL, [False])]))], []))
PY
