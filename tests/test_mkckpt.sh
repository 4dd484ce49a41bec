#!/usr/bin/env bash
# chatterbox-mkckpt: tiny Turbo and Multilingual checkpoints generate, are deterministic per
# seed, differ across seeds, and (when /usr/bin/python3 has torch) have the upstream file
# structure: safetensors headers, torch.load(weights_only=True) of the .pt files, conds.pt
# layout, tokenizer files consistent with the text embedding.
# Usage: test_mkckpt.sh BUILD_DIR
set -euo pipefail
BUILD=${1:?usage: test_mkckpt.sh BUILD_DIR}
BIN="$BUILD/bin/chatterbox-mkckpt"
[ -x "$BIN" ] || { echo "missing $BIN"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# ---- CLI ----
"$BIN" --help | grep -q -- "--variant turbo" || fail "--help"
if "$BIN" --variant nope --size tiny --seed 1 "$TMP/x" 2>"$TMP/err"; then fail "unknown variant accepted"; fi
grep -q "unknown variant 'nope'" "$TMP/err" || fail "unknown variant message: $(cat "$TMP/err")"
if "$BIN" --variant turbo --size huge --seed 1 "$TMP/x" 2>/dev/null; then fail "unknown size accepted"; fi
if "$BIN" --variant turbo --size tiny "$TMP/x" 2>/dev/null; then fail "missing --seed accepted"; fi
touch "$TMP/afile"
if "$BIN" --variant turbo --size tiny --seed 1 "$TMP/afile" 2>"$TMP/err"; then fail "file as DIR accepted"; fi
grep -q "not a directory" "$TMP/err" || fail "DIR-is-a-file message: $(cat "$TMP/err")"
if "$BIN" --variant turbo --size tiny --seed 1 "$TMP/afile/sub" 2>"$TMP/err"; then fail "unwritable DIR accepted"; fi
grep -q "cannot create directory" "$TMP/err" || fail "unwritable DIR message: $(cat "$TMP/err")"

# ---- generate ----
gen() {  # variant seed dir [extra...]
  local v=$1 s=$2 d=$3; shift 3
  "$BIN" --variant "$v" --size tiny --seed "$s" "$@" "$d" 2>"$TMP/log" || { cat "$TMP/log"; fail "generate $v seed $s"; }
}
gen turbo 1 "$TMP/t1"
gen turbo 1 "$TMP/t1b" --threads 1   # thread count must not change the bytes
gen turbo 2 "$TMP/t2"
gen nano 1 "$TMP/n1"
gen nano 1 "$TMP/n1b"
gen mtl 1 "$TMP/m1"
gen mtl 1 "$TMP/m1b"
gen mtl 2 "$TMP/m2"
gen mtl 1 "$TMP/m3" --t3-version v3

TURBO_FILES="t3_turbo_v1.safetensors s3gen_meanflow.safetensors ve.safetensors conds.pt vocab.json
 merges.txt added_tokens.json special_tokens_map.json tokenizer_config.json"
MTL_FILES="t3_mtl23ls_v2.safetensors s3gen.pt ve.pt conds.pt grapheme_mtl_merged_expanded_v1.json
 Cangjie5_TC.json"
for f in $TURBO_FILES; do [ -s "$TMP/t1/$f" ] || fail "turbo: missing $f"; done
for f in $MTL_FILES; do [ -s "$TMP/m1/$f" ] || fail "mtl: missing $f"; done
# Nano: Turbo's files with t3_nano_v1 in place of t3_turbo_v1; the shared files are Turbo's bytes.
for f in ${TURBO_FILES/t3_turbo_v1/t3_nano_v1}; do [ -s "$TMP/n1/$f" ] || fail "nano: missing $f"; done
[ ! -e "$TMP/n1/t3_turbo_v1.safetensors" ] || fail "nano also wrote t3_turbo_v1.safetensors"
[ "$(ls "$TMP/n1" | wc -l)" = "$(ls "$TMP/t1" | wc -l)" ] || fail "nano and turbo hold different file counts"
for f in s3gen_meanflow.safetensors ve.safetensors vocab.json merges.txt added_tokens.json; do
  cmp -s "$TMP/n1/$f" "$TMP/t1/$f" || fail "nano $f differs from turbo's"
done
[ -s "$TMP/m3/t3_mtl23ls_v3.safetensors" ] || fail "mtl v3: missing t3_mtl23ls_v3.safetensors"
[ ! -e "$TMP/m3/t3_mtl23ls_v2.safetensors" ] || fail "mtl v3 also wrote the v2 file"

sha() { sha256sum "$1" | cut -d' ' -f1; }
for f in $TURBO_FILES; do
  [ "$(sha "$TMP/t1/$f")" = "$(sha "$TMP/t1b/$f")" ] || fail "turbo $f differs for the same seed"
done
[ "$(sha "$TMP/n1/t3_nano_v1.safetensors")" = "$(sha "$TMP/n1b/t3_nano_v1.safetensors")" ] ||
  fail "nano t3 differs for the same seed"
for f in $MTL_FILES; do
  [ "$(sha "$TMP/m1/$f")" = "$(sha "$TMP/m1b/$f")" ] || fail "mtl $f differs for the same seed"
done
for f in t3_turbo_v1.safetensors s3gen_meanflow.safetensors ve.safetensors conds.pt merges.txt; do
  [ "$(sha "$TMP/t1/$f")" != "$(sha "$TMP/t2/$f")" ] || fail "turbo $f identical across seeds"
done
for f in t3_mtl23ls_v2.safetensors s3gen.pt ve.pt conds.pt grapheme_mtl_merged_expanded_v1.json; do
  [ "$(sha "$TMP/m1/$f")" != "$(sha "$TMP/m2/$f")" ] || fail "mtl $f identical across seeds"
done
[ "$(sha "$TMP/m1/t3_mtl23ls_v2.safetensors")" != "$(sha "$TMP/m3/t3_mtl23ls_v3.safetensors")" ] ||
  fail "v2 and v3 T3 files are identical"
echo "mkckpt: generation, determinism and CLI checks passed"

# ---- structure (needs torch) ----
PY=/usr/bin/python3
if ! [ -x "$PY" ] || ! "$PY" -c "import torch" 2>/dev/null; then
  echo "note: /usr/bin/python3 without torch; structural checks skipped"
  exit 0
fi
"$PY" - "$TMP/t1" "$TMP/m1" "$TMP/n1" <<'PYEOF'
import json, math, struct, sys
import torch

turbo, mtl, nano = sys.argv[1], sys.argv[2], sys.argv[3]
errors = []
def check(cond, msg):
    if not cond:
        errors.append(msg)

def read_safetensors(path):
    # Minimal parser: u64 header length, JSON header, contiguous data.
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    check(n % 8 == 0, f"{path}: header length {n} not a multiple of 8")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", None)
    data = blob[8 + n:]
    sizes = {"F32": 4, "I64": 8}
    end = 0
    out = {}
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = info["data_offsets"]
        check(b == end, f"{path}: {name} not contiguous")
        numel = math.prod(info["shape"])
        check(info["dtype"] in sizes, f"{path}: {name} dtype {info['dtype']}")
        check(e - b == numel * sizes.get(info["dtype"], 0), f"{path}: {name} size mismatch")
        end = e
        dt = torch.float32 if info["dtype"] == "F32" else torch.int64
        t = torch.frombuffer(bytearray(data[b:e]), dtype=dt).reshape(info["shape"]) if numel else torch.empty(info["shape"], dtype=dt)
        out[name] = t
    check(end == len(data), f"{path}: trailing bytes")
    return out, meta

def finite(sd, path):
    for k, v in sd.items():
        if v.dtype == torch.float32:
            check(bool(torch.isfinite(v).all()), f"{path}: {k} not finite")

def shapes(sd, expected, path):
    for k, shp in expected.items():
        if k not in sd:
            errors.append(f"{path}: missing {k}")
        elif list(sd[k].shape) != list(shp):
            errors.append(f"{path}: {k} shape {list(sd[k].shape)} != {shp}")

def common_s3gen(sd, path):
    # Every weight-normed conv: bias + g [C,1,1] + v; 82 of them in HiFT (spec 13.2).
    gs = [k for k in sd if k.endswith(".parametrizations.weight.original0")]
    check(len(gs) == 82, f"{path}: {len(gs)} weight-normed convs, expected 82")
    for g in gs:
        base = g[: -len(".parametrizations.weight.original0")]
        v = sd.get(base + ".parametrizations.weight.original1")
        check(v is not None and base + ".bias" in sd, f"{path}: incomplete weight norm {base}")
        if v is not None:
            check(list(sd[g].shape) == [v.shape[0], 1, 1], f"{path}: {g} shape")
        check(base + ".weight" not in sd, f"{path}: {base}.weight next to parametrization")
    check(all(k.startswith(("tokenizer.", "speaker_encoder.", "flow.", "mel2wav.")) for k in sd),
          f"{path}: unexpected top-level prefix")
    means = [k for k in sd if k.endswith(".running_mean")]
    check(len(means) > 0, f"{path}: no batch norms")
    for m in means:
        base = m[: -len(".running_mean")]
        check(bool((sd[base + ".running_var"] > 0).all()), f"{path}: {base}.running_var not positive")
        nb = sd.get(base + ".num_batches_tracked")
        check(nb is not None and nb.dtype == torch.int64 and nb.dim() == 0, f"{path}: {base}.num_batches_tracked")
    check("speaker_encoder.xvector.dense.nonlinear.batchnorm.weight" not in sd, f"{path}: dense BN must be affine=False")
    check("speaker_encoder.xvector.dense.nonlinear.batchnorm.running_var" in sd, f"{path}: dense BN stats")
    mel = sd["tokenizer._mel_filters"]
    check(list(mel.shape) == [128, 201] and float(mel.min()) >= 0 and float(mel.max()) > 0, f"{path}: mel filters")
    win = sd["tokenizer.window"]
    check(torch.allclose(win, torch.hann_window(400), atol=1e-6), f"{path}: tokenizer.window != hann_window(400)")
    # Tiny dims: flow 128, estimator 128, HiFT base 64, tokenizer 128, CAMPPlus m=8.
    shapes(sd, {
        "flow.input_embedding.weight": [6561, 128],
        "flow.spk_embed_affine_layer.weight": [80, 64],
        "flow.encoder.embed.out.0.weight": [128, 128],
        "flow.encoder.encoders.0.self_attn.pos_bias_u": [2, 64],
        "flow.encoder.encoders.0.feed_forward.w_1.weight": [256, 128],
        "flow.encoder.pre_lookahead_layer.conv1.weight": [128, 128, 4],
        "flow.encoder.up_layer.conv.weight": [128, 128, 5],
        "flow.encoder.up_encoders.0.self_attn.linear_pos.weight": [128, 128],
        "flow.encoder.after_norm.weight": [128],
        "flow.encoder_proj.weight": [80, 128],
        "flow.decoder.estimator.time_mlp.linear_1.weight": [512, 320],
        "flow.decoder.estimator.down_blocks.0.0.block1.block.0.weight": [128, 320, 3],
        "flow.decoder.estimator.down_blocks.0.0.mlp.1.weight": [128, 512],
        "flow.decoder.estimator.down_blocks.0.1.0.attn1.to_q.weight": [128, 128],
        "flow.decoder.estimator.down_blocks.0.1.0.attn1.to_out.0.bias": [128],
        "flow.decoder.estimator.down_blocks.0.1.0.ff.net.0.proj.weight": [512, 128],
        "flow.decoder.estimator.mid_blocks.1.0.res_conv.weight": [128, 128, 1],
        "flow.decoder.estimator.up_blocks.0.0.block1.block.0.weight": [128, 256, 3],
        "flow.decoder.estimator.up_blocks.0.2.weight": [128, 128, 3],
        "flow.decoder.estimator.final_proj.weight": [80, 128, 1],
        "mel2wav.conv_pre.parametrizations.weight.original1": [64, 80, 7],
        "mel2wav.ups.0.parametrizations.weight.original0": [64, 1, 1],
        "mel2wav.ups.0.parametrizations.weight.original1": [64, 32, 16],
        "mel2wav.ups.2.parametrizations.weight.original1": [16, 8, 7],
        "mel2wav.source_downs.0.weight": [32, 18, 30],
        "mel2wav.source_downs.2.weight": [8, 18, 1],
        "mel2wav.source_resblocks.2.convs1.0.parametrizations.weight.original1": [8, 8, 11],
        "mel2wav.resblocks.8.activations2.2.alpha": [8],
        "mel2wav.conv_post.parametrizations.weight.original1": [18, 8, 7],
        "mel2wav.f0_predictor.condnet.8.parametrizations.weight.original1": [64, 64, 3],
        "mel2wav.f0_predictor.classifier.weight": [1, 64],
        "mel2wav.m_source.l_linear.weight": [1, 9],
        "speaker_encoder.head.conv1.weight": [8, 1, 3, 3],
        "speaker_encoder.head.layer1.0.shortcut.0.weight": [8, 8, 1, 1],
        "speaker_encoder.xvector.tdnn.linear.weight": [32, 80, 5],
        "speaker_encoder.xvector.block1.tdnnd1.cam_layer.linear1.weight": [16, 32, 1],
        "speaker_encoder.xvector.block3.tdnnd2.nonlinear1.batchnorm.running_var": [48],
        "speaker_encoder.xvector.transit1.linear.weight": [32, 64, 1],
        "speaker_encoder.xvector.dense.linear.weight": [64, 64, 1],
        "tokenizer.encoder.conv1.weight": [128, 128, 3],
        "tokenizer.encoder.blocks.1.attn.fsmn_block.weight": [128, 1, 31],
        "tokenizer.encoder.blocks.1.mlp.0.weight": [512, 128],
        "tokenizer.quantizer._codebook.project_down.weight": [8, 128],
    }, path)
    check("speaker_encoder.head.layer1.1.shortcut.0.weight" not in sd, f"{path}: identity shortcut has weights")
    check("tokenizer.encoder.blocks.0.attn.key.bias" not in sd, f"{path}: S3 tokenizer key has no bias")

# ---------------- Turbo ----------------
t3, meta = read_safetensors(f"{turbo}/t3_turbo_v1.safetensors")
check(meta == {"format": "pt"}, "turbo t3 metadata")
finite(t3, "t3_turbo")
L = 2
check(len(t3) == L * 12 + 4 + 7, f"t3_turbo: {len(t3)} tensors, expected {L * 12 + 11}")
V = t3["text_emb.weight"].shape[0]
shapes(t3, {
    "tfmr.wte.weight": [V, 128], "tfmr.wpe.weight": [8196, 128],
    "tfmr.h.0.attn.c_attn.weight": [128, 384], "tfmr.h.1.attn.c_attn.bias": [384],
    "tfmr.h.0.attn.c_proj.weight": [128, 128], "tfmr.h.0.mlp.c_fc.weight": [128, 512],
    "tfmr.h.1.mlp.c_proj.weight": [512, 128], "tfmr.ln_f.bias": [128],
    "speech_emb.weight": [6563, 128], "text_head.weight": [V, 128],
    "speech_head.weight": [6563, 128], "speech_head.bias": [6563],
    "cond_enc.spkr_enc.weight": [128, 64], "cond_enc.spkr_enc.bias": [128],
}, "t3_turbo")
# ---------------- Nano: GPT-2 small layout, tiny: 3 layers x 192 ----------------
t3n, meta = read_safetensors(f"{nano}/t3_nano_v1.safetensors")
check(meta == {"format": "pt"}, "nano t3 metadata")
finite(t3n, "t3_nano")
check(len(t3n) == 3 * 12 + 4 + 7, f"t3_nano: {len(t3n)} tensors, expected {3 * 12 + 11}")
check(set(k for k in t3n if not k.startswith("tfmr.h.")) == set(k for k in t3 if not k.startswith("tfmr.h.")),
      "t3_nano: non-layer tensor names differ from Turbo's")
shapes(t3n, {
    "tfmr.wte.weight": [V, 192], "tfmr.wpe.weight": [8196, 192],
    "tfmr.h.2.attn.c_attn.weight": [192, 576], "tfmr.h.0.mlp.c_fc.weight": [192, 768],
    "tfmr.h.2.mlp.c_proj.weight": [768, 192], "speech_head.weight": [6563, 192],
    "cond_enc.spkr_enc.weight": [192, 64],
}, "t3_nano")
s3t, meta = read_safetensors(f"{turbo}/s3gen_meanflow.safetensors")
finite(s3t, "s3gen_meanflow")
common_s3gen(s3t, "s3gen_meanflow")
shapes(s3t, {"flow.decoder.estimator.time_embed_mixer.weight": [512, 1024]}, "s3gen_meanflow")
ve, _ = read_safetensors(f"{turbo}/ve.safetensors")
check(len(ve) == 16, f"ve.safetensors: {len(ve)} tensors")
shapes(ve, {"lstm.weight_ih_l0": [256, 40], "lstm.weight_hh_l2": [256, 64], "lstm.bias_ih_l1": [256],
            "proj.weight": [64, 64], "similarity_weight": [1], "similarity_bias": [1]}, "ve.safetensors")

def check_conds(path, P, spk, xvec):
    c = torch.load(path, map_location="cpu", weights_only=True)
    check(set(c) == {"t3", "gen"}, f"{path}: top keys {set(c)}")
    t3c, gen = c["t3"], c["gen"]
    check(list(t3c) == ["speaker_emb", "clap_emb", "cond_prompt_speech_tokens", "cond_prompt_speech_emb", "emotion_adv"],
          f"{path}: t3 keys {list(t3c)}")
    check(list(gen) == ["prompt_token", "prompt_token_len", "prompt_feat", "prompt_feat_len", "embedding"],
          f"{path}: gen keys {list(gen)}")
    check(t3c["clap_emb"] is None and t3c["cond_prompt_speech_emb"] is None and gen["prompt_feat_len"] is None,
          f"{path}: None fields")
    se, tok, emo = t3c["speaker_emb"], t3c["cond_prompt_speech_tokens"], t3c["emotion_adv"]
    check(se.dtype == torch.float32 and list(se.shape) == [1, spk], f"{path}: speaker_emb {se.shape}")
    check(abs(float(se.norm()) - 1) < 1e-4 and float(se.min()) >= 0, f"{path}: speaker_emb not a ReLU'd unit vector")
    check(tok.dtype == torch.int64 and list(tok.shape) == [1, P], f"{path}: cond tokens {tok.dtype} {tok.shape}")
    check(int(tok.min()) >= 0 and int(tok.max()) < 6561, f"{path}: cond tokens out of range")
    check(emo.dtype == torch.float32 and list(emo.shape) == [1, 1, 1], f"{path}: emotion_adv")
    pt, ptl, pf, emb = gen["prompt_token"], gen["prompt_token_len"], gen["prompt_feat"], gen["embedding"]
    check(pt.dtype == torch.int64 and pt.dim() == 2 and pt.shape[0] == 1, f"{path}: prompt_token")
    check(int(pt.min()) >= 0 and int(pt.max()) < 6561, f"{path}: prompt tokens out of range")
    check(ptl.dtype == torch.int64 and ptl.tolist() == [pt.shape[1]], f"{path}: prompt_token_len")
    check(pf.dtype == torch.float32 and list(pf.shape) == [1, 2 * pt.shape[1], 80], f"{path}: prompt_feat {pf.shape}")
    check(float(pf.min()) >= math.log(1e-5) - 1e-3, f"{path}: prompt_feat below the log-mel floor")
    check(list(emb.shape) == [1, xvec], f"{path}: embedding {emb.shape}")

check_conds(f"{turbo}/conds.pt", 75, t3["cond_enc.spkr_enc.weight"].shape[1],
            s3t["flow.spk_embed_affine_layer.weight"].shape[1])

# Turbo tokenizer files: vocab + 19 added tags == text_emb rows; merges valid.
vocab = json.load(open(f"{turbo}/vocab.json", encoding="utf-8"))
added = json.load(open(f"{turbo}/added_tokens.json", encoding="utf-8"))
eot = vocab["<|endoftext|>"]
check(eot == len(vocab) - 1, "vocab.json: <|endoftext|> is not the last id")
check(sorted(vocab.values()) == list(range(len(vocab))), "vocab.json ids not contiguous")
check(len(added) == 19 and sorted(added.values()) == list(range(eot + 1, eot + 20)), "added_tokens.json ids")
for tag in ("[laugh]", "[chuckle]", "[cough]", "[clear throat]", "[angry]"):
    check(tag in added, f"added_tokens.json: missing {tag}")
check(added["[angry]"] == eot + 1 and added["[laugh]"] == eot + 19, "added tag order")
check(len(vocab) + len(added) == V, f"tokenizer size {len(vocab) + len(added)} != text_emb rows {V}")
lines = open(f"{turbo}/merges.txt", encoding="utf-8").read().split("\n")
check(lines[0].startswith("#version"), "merges.txt header")
merges = [l for l in lines[1:] if l]
check(len(merges) == eot - 256, f"merges.txt: {len(merges)} merges, expected {eot - 256}")
for i, m in enumerate(merges):
    a, b = m.split(" ")
    if not (a in vocab and b in vocab and vocab.get(a + b) == 256 + i):
        errors.append(f"merges.txt: bad merge {i} {m!r}")
        break
cfg = json.load(open(f"{turbo}/tokenizer_config.json"))
check(cfg["tokenizer_class"] == "GPT2Tokenizer" and cfg["eos_token"] == "<|endoftext|>", "tokenizer_config.json")
check(cfg["added_tokens_decoder"][str(eot + 1)]["content"] == "[angry]", "tokenizer_config added_tokens_decoder")
json.load(open(f"{turbo}/special_tokens_map.json"))

# ---------------- Multilingual ----------------
t3m, meta = read_safetensors(f"{mtl}/t3_mtl23ls_v2.safetensors")
finite(t3m, "t3_mtl")
Vm = t3m["text_emb.weight"].shape[0]
check(len(t3m) == 1 + L * 9 + 1 + 2 + 1 + 1 + 2 + 8 + 4 + 2, f"t3_mtl: {len(t3m)} tensors")
shapes(t3m, {
    "tfmr.embed_tokens.weight": [8, 128], "tfmr.layers.1.self_attn.q_proj.weight": [128, 128],
    "tfmr.layers.0.self_attn.o_proj.weight": [128, 128], "tfmr.layers.0.mlp.gate_proj.weight": [384, 128],
    "tfmr.layers.1.mlp.down_proj.weight": [128, 384], "tfmr.layers.1.input_layernorm.weight": [128],
    "tfmr.layers.0.post_attention_layernorm.weight": [128], "tfmr.norm.weight": [128],
    "speech_emb.weight": [8194, 128], "text_pos_emb.emb.weight": [2050, 128],
    "speech_pos_emb.emb.weight": [4100, 128], "text_head.weight": [Vm, 128], "speech_head.weight": [8194, 128],
    "cond_enc.spkr_enc.weight": [128, 64], "cond_enc.emotion_adv_fc.weight": [128, 1],
    "cond_enc.perceiver.pre_attention_query": [1, 32, 128], "cond_enc.perceiver.attn.norm.weight": [128],
    "cond_enc.perceiver.attn.to_k.weight": [128, 128], "cond_enc.perceiver.attn.proj_out.bias": [128],
}, "t3_mtl")
check("speech_head.bias" not in t3m and "tfmr.layers.0.self_attn.q_proj.bias" not in t3m, "t3_mtl: unexpected biases")
s3m = torch.load(f"{mtl}/s3gen.pt", map_location="cpu", weights_only=True)
check(isinstance(s3m, dict), "s3gen.pt is not a state dict")
finite(s3m, "s3gen.pt")
common_s3gen(s3m, "s3gen.pt")
check(set(s3m) == set(s3t) - {"flow.decoder.estimator.time_embed_mixer.weight"},
      "s3gen.pt keys != s3gen_meanflow keys minus time_embed_mixer")
vem = torch.load(f"{mtl}/ve.pt", map_location="cpu", weights_only=True)
check(list(vem) == ["similarity_weight", "similarity_bias"] + [f"lstm.{w}_l{l}" for l in range(3) for w in
      ("weight_ih", "weight_hh", "bias_ih", "bias_hh")] + ["proj.weight", "proj.bias"], f"ve.pt keys {list(vem)}")
check_conds(f"{mtl}/conds.pt", 50, t3m["cond_enc.spkr_enc.weight"].shape[1],
            s3m["flow.spk_embed_affine_layer.weight"].shape[1])

tok = json.load(open(f"{mtl}/grapheme_mtl_merged_expanded_v1.json", encoding="utf-8"))
mv = tok["model"]["vocab"]
check(tok["model"]["type"] == "BPE" and tok["pre_tokenizer"]["type"] == "Whitespace", "mtl tokenizer type")
check(len(mv) == Vm and sorted(mv.values()) == list(range(Vm)), f"mtl vocab size {len(mv)} != text_emb rows {Vm}")
for t, i in (("[STOP]", 0), ("[UNK]", 1), ("[SPACE]", 2), ("[START]", 255)):
    check(mv.get(t) == i, f"mtl vocab: {t} != {i}")
added_m = {a["content"]: a["id"] for a in tok["added_tokens"]}
for lang in "ar da de el en es fi fr he hi it ja ko ms nl no pl pt ru sv sw tr zh".split():
    check(f"[{lang}]" in added_m, f"mtl: missing language tag [{lang}]")
for c in "abcxyz.":
    check(f"[cj_{c}]" in added_m, f"mtl: missing [cj_{c}]")
for a, i in added_m.items():
    check(mv.get(a) == i, f"mtl: added token {a} id mismatch")
for ch in ("a", "é", "\u0301", "д", "α", "א", "ا", "क", "\u1100", "\u1161", "あ", "\u3099", "你"):
    check(ch in mv, f"mtl vocab: missing {ch!r}")
for m in tok["model"]["merges"]:
    a, b = m.split(" ") if isinstance(m, str) else m
    if not (a in mv and b in mv and (a + b) in mv):
        errors.append(f"mtl merge {m!r} invalid")
        break
cj = json.load(open(f"{mtl}/Cangjie5_TC.json", encoding="utf-8"))
check(isinstance(cj, list) and all(isinstance(e, str) and len(e.split("\t")) == 2 for e in cj), "Cangjie5_TC.json format")
codes = [e.split("\t")[1] for e in cj]
check(all(c.isalpha() and c.islower() for c in codes), "Cangjie codes are lower-case letters")
check(len(set(codes)) < len(codes), "Cangjie table has no shared codes (index suffix untested)")
check("你" in [e.split("\t")[0] for e in cj], "Cangjie table lacks 你")

if errors:
    print("\n".join("FAIL: " + e for e in errors[:40]))
    sys.exit(1)
print("structure OK:", len(t3), "turbo T3 tensors,", len(s3t), "s3gen tensors,", len(t3m), "mtl T3 tensors")
PYEOF
echo "mkckpt: structural checks passed"
