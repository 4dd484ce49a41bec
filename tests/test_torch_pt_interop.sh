#!/usr/bin/env bash
# torch .pt interop against real PyTorch (Debian python3-torch):
#  (a) files written by torch.save are read by our reader with identical values
#      (nested conds.pt-like dicts, f32/f16/bf16/f64/int tensors, views with offsets/strides);
#  (b) files written by our writer load in torch.load(weights_only=True) with identical values,
#      with and without forced ZIP64 records;
#  (c) zip variants: a ZIP64 repack by Python's zipfile is read, a deflated one is refused;
#  (d) our safetensors output parses with an independent (Python) reader of the format.
# Usage: test_torch_pt_interop.sh BUILD_DIR. Exit 77 (skip) without torch.
set -euo pipefail
BUILD=${1:-${CBX_BINARY_DIR:-build}}
CLI="$(cd "$BUILD" && pwd)/bin/chatterbox"
PY=/usr/bin/python3
[ -x "$PY" ] && "$PY" -c "import torch" 2>/dev/null || { echo "skip: no torch under $PY"; exit 77; }
[ -x "$CLI" ] || { echo "missing $CLI"; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

"$PY" - <<'PY'
import collections, torch
torch.manual_seed(0)
conds = {
    "t3": {"speaker_emb": torch.randn(1, 256), "clap_emb": None,
           "cond_prompt_speech_tokens": torch.randint(0, 6561, (1, 375)),
           "cond_prompt_speech_emb": None, "emotion_adv": 0.5 * torch.ones(1, 1, 1)},
    "gen": {"prompt_token": torch.randint(0, 6561, (1, 250)), "prompt_token_len": torch.tensor([250]),
            "prompt_feat": torch.randn(1, 500, 80), "prompt_feat_len": None,
            "embedding": torch.randn(1, 192)},
}
torch.save(conds, "conds.pt")
base = torch.randn(6, 10)
sd = collections.OrderedDict([
    ("enc.f32", torch.randn(3, 4)), ("enc.f16", torch.randn(5).half()),
    ("enc.bf16", torch.randn(2, 3).bfloat16()), ("enc.f64", torch.randn(4, dtype=torch.float64)),
    ("enc.i32", torch.arange(-3, 4, dtype=torch.int32)), ("enc.i16", torch.tensor([-7, 300], dtype=torch.int16)),
    ("enc.i8", torch.tensor([-3, 4], dtype=torch.int8)), ("big", torch.tensor([2**40, -2**62])),
    ("view.t", base.t()), ("view.slice", base[2:5, 1:8:3]), ("view.row", base[4]),
    ("view.expand", torch.randn(3, 1).expand(3, 4)), ("scalar", torch.tensor(3.5)),
    ("empty", torch.zeros(0, 4)), ("bf16.view", torch.randn(4, 6).bfloat16()[1:, ::2]),
])
torch.save(sd, "sd.pt")
torch.save(torch.nn.Linear(3, 2).state_dict(), "linear.pt")  # OrderedDict with _metadata
x = torch.randn(3)
torch.save({"w": torch.nn.Parameter(torch.randn(2, 2)), "n": [1, -5, 70000, 2**31, -2**63, True],
            "s": "text", "t": (1, 2), "dup": [x, x, {"again": x}]}, "misc.pt")  # memoized tensor
PY

# The reference values torch sees, as JSON comparable with `ckpt-dump --json`.
cat > compare.py <<'PY'
import json, sys, torch
def ref(o):
    if isinstance(o, torch.Tensor):
        t = o.detach()
        if t.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            vals = t.double().flatten().tolist()
        else:
            vals = t.long().flatten().tolist()
        return {"__tensor__": {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "values": vals}}
    if isinstance(o, dict):
        return {str(k): ref(v) for k, v in o.items()}
    if isinstance(o, tuple):
        return {"__tuple__": [ref(v) for v in o]}
    if isinstance(o, list):
        return [ref(v) for v in o]
    return o
NAMES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int64": "i64",
         "int32": "i32", "int16": "i16", "int8": "i8"}
def norm(o):
    if isinstance(o, dict):
        if "__tensor__" in o:
            t = dict(o["__tensor__"]); t["dtype"] = NAMES.get(t["dtype"], t["dtype"]); return {"__tensor__": t}
        return {k: norm(v) for k, v in o.items()}
    if isinstance(o, list):
        return [norm(v) for v in o]
    return o
def diff(a, b, path=""):
    if type(a) != type(b):
        print(f"{path}: {str(a)[:200]} != {str(b)[:200]}")
    elif isinstance(a, dict):
        for k in set(a) | set(b):
            diff(a.get(k), b.get(k), path + "." + k)
    elif isinstance(a, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]")
    elif a != b:
        print(f"{path}: {str(a)[:200]} != {str(b)[:200]}")
def check(mode, pt, ours):
    expect = norm(ref(torch.load(pt, weights_only=True)))
    if mode == "read":  # our reader on a torch-written file
        got = norm(json.load(open(ours)))
    else:               # torch (weights_only) on our file vs torch on the original
        got = norm(ref(torch.load(ours, weights_only=True)))
    if json.dumps(expect, sort_keys=True) != json.dumps(got, sort_keys=True):
        diff(expect, got)
        sys.exit(f"{mode} mismatch for {pt} ({ours})")
    print(f"ok {mode} {pt} ({ours})")
args = sys.argv[1:]  # triples: MODE TORCH_FILE OUR_FILE
for i in range(0, len(args), 3):
    check(*args[i:i + 3])
PY

checks=()
for f in conds sd linear misc; do
  "$CLI" ckpt-dump "$f.pt" --json > "$f.json"
  checks+=(read "$f.pt" "$f.json")
done

# (b) our writer -> torch.load(weights_only=True). misc.pt holds a bool inside a list,
# which our tree keeps as Bool, so it round-trips too.
for f in conds sd linear misc; do
  "$CLI" ckpt-dump "$f.pt" --save-pt "ours_$f.pt" > /dev/null
  "$CLI" ckpt-dump "$f.pt" --save-pt "ours64_$f.pt" --zip64 > /dev/null
  "$CLI" ckpt-dump "ours64_$f.pt" --json > "ours64_$f.json"
  checks+=(write "$f.pt" "ours_$f.pt" write "$f.pt" "ours64_$f.pt" read "$f.pt" "ours64_$f.json")
done
"$PY" -c "
import sys, zipfile
for f in sys.argv[1:]:
    assert zipfile.ZipFile(f).testzip() is None, f" ours_*.pt ours64_*.pt

# (c) Python's zipfile repacks: forced ZIP64 entries are read; deflated entries refused clearly.
"$PY" - <<'PY'
import zipfile
src = zipfile.ZipFile("sd.pt")
with zipfile.ZipFile("sd_zip64.pt", "w", zipfile.ZIP_STORED) as z:
    for i in src.infolist():
        with z.open(i.filename, "w", force_zip64=True) as w:
            w.write(src.read(i.filename))
with zipfile.ZipFile("sd_deflate.pt", "w", zipfile.ZIP_DEFLATED) as z:
    for i in src.infolist():
        z.writestr(i.filename, src.read(i.filename))
PY
"$CLI" ckpt-dump sd_zip64.pt --json > sd_zip64.json
checks+=(read sd.pt sd_zip64.json)
"$PY" compare.py "${checks[@]}"
if "$CLI" ckpt-dump sd_deflate.pt > /dev/null 2> deflate.err; then
  echo "deflated archive was accepted"; exit 1
fi
grep -q "sd_deflate.pt.*compressed" deflate.err || { cat deflate.err; exit 1; }

# A refused global is named.
"$PY" - <<'PY'
import torch, os
class Evil:
    def __reduce__(self):
        return (os.system, ("true",))
torch.save({"x": Evil()}, "evil.pt")
PY
if "$CLI" ckpt-dump evil.pt > /dev/null 2> evil.err; then echo "evil.pt accepted"; exit 1; fi
grep -q "refused global 'posix.system'" evil.err || { cat evil.err; exit 1; }

# (d) safetensors written by us, checked by an independent reader of the format.
"$CLI" ckpt-dump sd.pt --save-safetensors sd.safetensors > /dev/null
"$PY" - <<'PY'
import json, struct, torch
raw = open("sd.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
assert (8 + n) % 8 == 0, "header not padded to 8 bytes"
hdr = json.loads(raw[8:8 + n])
data = raw[8 + n:]
ref = torch.load("sd.pt", weights_only=True)
DT = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
      "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8}
assert set(hdr) == set(ref), (set(hdr) ^ set(ref))
end = 0
for name, e in hdr.items():
    b, en = e["data_offsets"]
    assert b == end, f"{name}: not packed"
    end = en
    buf = bytearray(data[b:en])
    t = torch.frombuffer(buf, dtype=DT[e["dtype"]]) if buf else torch.zeros(0, dtype=DT[e["dtype"]])
    t = t.reshape(e["shape"])
    assert torch.equal(t, ref[name].contiguous()), name
assert end == len(data)
print("ok safetensors")
PY
echo "all interop checks passed"
