#!/usr/bin/env bash
# End-to-end effect of the int8 CFM linears (GemmPrecision::Int8: `debug cfm --gemm-precision int8`,
# the transformer linears on the int8 GEMM of kernels/matmul_int8.h, everything else as bf16) on
# the tiny synthetic checkpoints (chatterbox-mkckpt --size tiny, f32 GGUFs): Turbo (mean-flow,
# 2 steps, one row) and Multilingual (CFG pair, 10 steps). Inputs: `debug flow` on fixed speech
# tokens (mu, cond, spks of the model's voice); the CFM noise from seed 0 in every run.
# Checks, relative L2 ||x - f32|| / ||f32|| of the mel:
#   int8 <= 5e-2 (observed 6.9e-3 Turbo, 1.0e-2 Multilingual with the VNNI kernel and bf16
#     convolutions; 5.8e-3, 8.8e-3 with CBX_DEBUG_FORCE_ISA=generic (f32 convolutions); the
#     activations are quantized per row to 8 bits, a step of max|row| / 127, the weights per
#     channel; bf16 rounds both to 8 significant bits with a relative step, observed 3.6e-3, 4.5e-3)
#   int8 differs from f32 and from bf16 (it must run), is finite, and is the same for 1 and 3
#     threads (exact integer sums; the per-row float epilogue does not depend on the split);
#   a bad --gemm-precision value is an error naming it.
# usage: test_gemm_int8.sh BUILD_DIR   (exit 77 = skipped)
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
cli_test_init "$BUILD" test-gemm-int8
CLI=$B
PY=/usr/bin/python3

# 60 speech tokens, int32 .npy (standard library only).
"$PY" - "$T/tokens.npy" <<'PYEOF'
import array, struct, sys
vals = [(i * 97 + 13) % 512 for i in range(60)]
h = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }" % len(vals)
h += " " * (64 - (10 + len(h) + 1) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode("latin1") + array.array("i", vals).tobytes())
PYEOF

for v in turbo mtl; do
  tiny_gguf "$v" 3 "$T/ck_$v" "$T/$v.gguf"
  "$CLI" debug flow -m "$T/$v.gguf" --tokens "$T/tokens.npy" --out-mu "$T/${v}_mu.npy" --out-cond "$T/${v}_cond.npy" \
    --out-spks "$T/${v}_spks.npy" --threads 2 > /dev/null || fail "$v: debug flow"
  for p in f32 bf16 int8; do
    for th in 1 3; do
      [ "$p" = int8 ] || [ "$th" = 3 ] || continue
      "$CLI" debug cfm -m "$T/$v.gguf" --mu "$T/${v}_mu.npy" --cond "$T/${v}_cond.npy" --spks "$T/${v}_spks.npy" \
        --seed 0 --gemm-precision "$p" --threads "$th" --out-mel "$T/${v}_${p}_$th.npy" > /dev/null || fail "$v: debug cfm $p"
    done
  done
  cmp -s "$T/${v}_int8_1.npy" "$T/${v}_int8_3.npy" || fail "$v: int8 mel differs between 1 and 3 threads"
done

"$PY" - "$T" <<'PYEOF'
import array, math, re, struct, sys
d = sys.argv[1]
def load(p):
    b = open(p, "rb").read()
    hl = struct.unpack_from("<H", b, 8)[0]
    assert re.search(r"'descr':\s*'<f4'", b[10:10 + hl].decode("latin1")), p
    a = array.array("f"); a.frombytes(b[10 + hl:]); return a
def rel(x, r):
    return math.sqrt(math.fsum((a - b) ** 2 for a, b in zip(x, r)) / max(math.fsum(b * b for b in r), 1e-30))
ok = True
for v in ("turbo", "mtl"):
    f, b, q = (load(f"{d}/{v}_{p}_{t}.npy") for p, t in (("f32", 3), ("bf16", 3), ("int8", 3)))
    eb, eq, ebq = rel(b, f), rel(q, f), rel(q, b)
    print(f"{v}: rel L2 vs f32: bf16 {eb:.3e}, int8 {eq:.3e} (bound 5e-2); int8 vs bf16 {ebq:.3e}")
    if not all(math.isfinite(x) for x in q): print(f"FAIL: {v}: int8 mel not finite"); ok = False
    if eq > 5e-2: print(f"FAIL: {v}: int8 error above the bound"); ok = False
    if eq == 0 or ebq == 0: print(f"FAIL: {v}: int8 gave the f32 / bf16 mel (did it run?)"); ok = False
sys.exit(0 if ok else 1)
PYEOF

expect_error "--gemm-precision" "int4" -- "$CLI" debug cfm -m "$T/mtl.gguf" --mu "$T/mtl_mu.npy" --cond "$T/mtl_cond.npy" \
  --spks "$T/mtl_spks.npy" --gemm-precision int4 --out-mel "$T/x.npy"
echo "PASS"
