#!/usr/bin/python3
"""PyTorch reference of the Multilingual T3 (HF LlamaModel backbone + T3CondEnc/Perceiver,
t3.py T3.inference with CFG) built from torch primitives on the upstream-format
t3_mtl23ls_v*.safetensors written by chatterbox-mkckpt, for tests/test_t3_mtl_parity.sh.
No KV cache here: every step recomputes the whole sequence (an independent check of the
C++ cache, positions and doubled BOS).

  t3_mtl_reference.py inputs CKPT_DIR OUT_DIR --seed N --n-text L --n-prompt P
      random text ids (no SOT/EOT), speaker embedding and prompt tokens (.npy)
  t3_mtl_reference.py cond CKPT_DIR IN_DIR --cond C.npy [--exaggeration X] [--no-prompt] [--rtol R]
      compares the conditioning tokens
  t3_mtl_reference.py greedy CKPT_DIR IN_DIR --steps N --logits L.npy --guided G.npy --tokens T.npy
                      [--cfg-weight W] [--exaggeration X] [--rtol R] [--min-tokens M] [--prefill-only]
      greedy generation (CFG, full processor chain, argmax); compares raw cond/uncond logits,
      CFG-combined logits and tokens step by step
  t3_mtl_reference.py gqa CKPT_DIR OUT_DIR
      copies the checkpoint with k_proj/v_proj cut to their first head (grouped-query
      attention: every query head shares one key/value head), to test that path
  t3_mtl_reference.py sampler CKPT_DIR IN_DIR --logits L.npy --tokens T.npy --processed P.npy
                      [--cfg-weight W --temperature T --min-p M --top-p P --rep R]
      applies the HF processor chain (Multilingual order) to the C++ raw logits with the C++
      token history; compares the processed logits; checks each sampled token was allowed

Exit 0 on success, 1 on a mismatch (with a message).
"""
import argparse
import glob
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64,
          "I32": torch.int32}
SOT, EOT, SOS, EOS = 255, 0, 6561, 6562
# mtl_tts.py generate() defaults
CFG, TEMPERATURE, MIN_P, TOP_P, REP, EXAGGERATION = 0.5, 0.8, 0.05, 1.0, 1.2, 0.5
# Llama_520M rope (llama_configs.py): theta, llama3 factor, low/high freq factors, original context
ROPE_THETA, ROPE_FACTOR, ROPE_LOW, ROPE_HIGH, ROPE_ORIG = 500000.0, 8.0, 1.0, 4.0, 8192
HEAD_DIM, RMS_EPS, LN_EPS, PERCEIVER_HEADS = 64, 1e-5, 1e-5, 4


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        dt = DTYPES[info["dtype"]]
        buf = bytearray(raw[base + b:base + e])
        t = torch.frombuffer(buf, dtype=dt) if e > b else torch.empty(0, dtype=dt)
        t = t.reshape(info["shape"])
        out[name] = t.float() if dt in (torch.float16, torch.bfloat16) else t
    return out


def t3_file(ckpt_dir):
    files = sorted(glob.glob(os.path.join(ckpt_dir, "t3_mtl23ls_v*.safetensors")))
    if not files:
        sys.exit(f"no t3_mtl23ls_v*.safetensors in {ckpt_dir}")
    return files[0]


def llama3_inv_freq(dim):
    """HF _compute_llama3_parameters (transformers 4.46), in f32."""
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    low_wl, high_wl = ROPE_ORIG / ROPE_LOW, ROPE_ORIG / ROPE_HIGH
    wl = 2 * math.pi / inv
    inv_l = torch.where(wl > low_wl, inv / ROPE_FACTOR, inv)
    smooth = (ROPE_ORIG / wl - ROPE_LOW) / (ROPE_HIGH - ROPE_LOW)
    smoothed = (1 - smooth) * inv_l / ROPE_FACTOR + smooth * inv_l
    medium = ~(wl < high_wl) * ~(wl > low_wl)
    return torch.where(medium, smoothed, inv_l)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class T3Mtl:
    def __init__(self, ckpt_dir):
        w = self.w = load_safetensors(t3_file(ckpt_dir))
        self.n_layer = len([k for k in w if k.startswith("tfmr.layers.") and k.endswith(".input_layernorm.weight")])
        self.d = w["tfmr.norm.weight"].shape[0]
        self.n_head = w["tfmr.layers.0.self_attn.q_proj.weight"].shape[0] // HEAD_DIM
        self.n_kv = w["tfmr.layers.0.self_attn.k_proj.weight"].shape[0] // HEAD_DIM
        self.inv_freq = llama3_inv_freq(HEAD_DIM)

    # ---- conditioning (cond_enc.py, perceiver.py) ----
    def attn_block(self, x1, x2):
        w, d = self.w, self.d
        p = "cond_enc.perceiver.attn."
        n1 = F.layer_norm(x1, (d,), w[p + "norm.weight"], w[p + "norm.bias"], LN_EPS)
        n2 = F.layer_norm(x2, (d,), w[p + "norm.weight"], w[p + "norm.bias"], LN_EPS)
        q = F.linear(n1, w[p + "to_q.weight"], w[p + "to_q.bias"])
        k = F.linear(n2, w[p + "to_k.weight"], w[p + "to_k.bias"])
        v = F.linear(n2, w[p + "to_v.weight"], w[p + "to_v.bias"])
        H, Dh = PERCEIVER_HEADS, d // PERCEIVER_HEADS
        q, k, v = [t.view(-1, H, Dh).transpose(0, 1) for t in (q, k, v)]
        a = torch.softmax((q @ k.transpose(1, 2)) * Dh ** -0.5, dim=-1) @ v
        h = F.linear(a.transpose(0, 1).reshape(-1, d), w[p + "proj_out.weight"], w[p + "proj_out.bias"])
        return x1 + h

    def cond(self, speaker, prompt, exaggeration):
        w = self.w
        spk = F.linear(speaker.view(1, -1), w["cond_enc.spkr_enc.weight"], w["cond_enc.spkr_enc.bias"])
        parts = [spk]
        if prompt is not None and len(prompt) > 0:
            pe = w["speech_emb.weight"][prompt] + w["speech_pos_emb.emb.weight"][torch.arange(len(prompt))]
            query = w["cond_enc.perceiver.pre_attention_query"][0]
            pre = self.attn_block(query, pe)
            parts.append(self.attn_block(pre, pre))
        emo = F.linear(torch.tensor([[exaggeration]], dtype=torch.float32), w["cond_enc.emotion_adv_fc.weight"])
        parts.append(emo)
        return torch.cat(parts, dim=0)

    # ---- prompt (t3.py prepare_input_embeds + inference) ----
    def embeds(self, cond, text, generated, cfg_weight):
        w = self.w
        ids = torch.tensor([SOT] + list(text) + [EOT], dtype=torch.long)
        tpos = w["text_pos_emb.emb.weight"][torch.arange(len(ids))]
        te = w["text_emb.weight"][ids]
        te_u = torch.zeros_like(te) if cfg_weight > 0 else te
        bos = w["speech_emb.weight"][SOS] + w["speech_pos_emb.emb.weight"][0]
        rows = [bos[None], bos[None]]  # prepare_input_embeds' BOS, then inference's second copy
        for k, tok in enumerate(generated):
            rows.append((w["speech_emb.weight"][tok] + w["speech_pos_emb.emb.weight"][k + 1])[None])
        sp = torch.cat(rows, dim=0)
        row0 = torch.cat([cond, te + tpos, sp], dim=0)
        row1 = torch.cat([cond, te_u + tpos, sp], dim=0)
        return torch.stack([row0, row1])

    # ---- LlamaModel(inputs_embeds) + speech_head, last position ----
    def logits(self, x):
        w = self.w
        B, L, d = x.shape
        H, Hkv, D = self.n_head, self.n_kv, HEAD_DIM
        pos = torch.arange(L, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos(), emb.sin()
        mask = torch.full((L, L), float("-inf")).triu(1)

        def rms(t, wt):
            return wt * (t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + RMS_EPS))

        for i in range(self.n_layer):
            p = f"tfmr.layers.{i}."
            h = rms(x, w[p + "input_layernorm.weight"])
            q = F.linear(h, w[p + "self_attn.q_proj.weight"]).view(B, L, H, D).transpose(1, 2)
            k = F.linear(h, w[p + "self_attn.k_proj.weight"]).view(B, L, Hkv, D).transpose(1, 2)
            v = F.linear(h, w[p + "self_attn.v_proj.weight"]).view(B, L, Hkv, D).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if Hkv != H:
                k = k.repeat_interleave(H // Hkv, dim=1)
                v = v.repeat_interleave(H // Hkv, dim=1)
            a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D) + mask, dim=-1) @ v
            x = x + F.linear(a.transpose(1, 2).reshape(B, L, H * D), w[p + "self_attn.o_proj.weight"])
            h = rms(x, w[p + "post_attention_layernorm.weight"])
            g = F.linear(h, w[p + "mlp.gate_proj.weight"])
            u = F.linear(h, w[p + "mlp.up_proj.weight"])
            x = x + F.linear(F.silu(g) * u, w[p + "mlp.down_proj.weight"])
        hn = rms(x[:, -1], w["tfmr.norm.weight"])
        return F.linear(hn, w["speech_head.weight"])  # [B, V]


# ---- HF logits processors (Multilingual order, t3.py:338-361) ----
def repetition(ids, scores, penalty):
    ids = torch.tensor(ids, dtype=torch.long)[None]
    s = torch.gather(scores, 1, ids)
    s = torch.where(s < 0, s * penalty, s / penalty)
    return scores.scatter(1, ids, s)


def min_p_warp(scores, min_p):
    probs = torch.softmax(scores, dim=-1)
    top = probs.amax(dim=-1, keepdim=True)
    remove = probs < min_p * top
    order = torch.argsort(scores, descending=True, dim=-1)
    sremove = torch.gather(remove, 1, order)
    sremove[..., :1] = False
    remove = sremove.scatter(1, order, sremove)
    return scores.masked_fill(remove, float("-inf"))


def top_p_warp(scores, top_p):
    sl, si = torch.sort(scores, descending=False)
    cum = sl.softmax(dim=-1).cumsum(dim=-1)
    sremove = cum <= (1 - top_p)
    sremove[..., -1:] = False
    remove = sremove.scatter(1, si, sremove)
    return scores.masked_fill(remove, float("-inf"))


def chain(cond, uncond, history, cfg_weight, temperature, min_p, top_p, rep):
    logits = cond + torch.as_tensor(cfg_weight, dtype=cond.dtype) * (cond - uncond)
    guided = logits.clone()
    logits = repetition(history, logits, rep)
    if temperature != 1.0:
        logits = logits / temperature
    logits = min_p_warp(logits, min_p)
    logits = top_p_warp(logits, top_p)
    return guided, logits


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def load_inputs(in_dir, no_prompt=False):
    text = np.load(os.path.join(in_dir, "text.npy")).astype(np.int64).reshape(-1).tolist()
    spk = torch.from_numpy(np.load(os.path.join(in_dir, "speaker.npy")).astype(np.float32).reshape(-1))
    prompt = None if no_prompt else torch.from_numpy(np.load(os.path.join(in_dir, "prompt.npy")).astype(np.int64).reshape(-1))
    return text, spk, prompt


def cmd_inputs(a):
    m = T3Mtl(a.ckpt)
    rng = np.random.default_rng(a.seed)
    vt = m.w["text_emb.weight"].shape[0]
    pool = np.array([i for i in range(1, vt) if i != SOT])
    text = rng.choice(pool, size=a.n_text).astype(np.int32)
    spk = rng.standard_normal(m.w["cond_enc.spkr_enc.weight"].shape[1]).astype(np.float32) * 0.3
    prompt = rng.integers(0, 6561, size=a.n_prompt).astype(np.int32)
    os.makedirs(a.out, exist_ok=True)
    np.save(os.path.join(a.out, "text.npy"), text)
    np.save(os.path.join(a.out, "speaker.npy"), spk)
    np.save(os.path.join(a.out, "prompt.npy"), prompt)
    return 0


def cmd_gqa(a):
    import shutil
    shutil.copytree(a.ckpt, a.out)
    path = t3_file(a.out)
    w = load_safetensors(path)
    for k in list(w):
        if k.endswith(("self_attn.k_proj.weight", "self_attn.v_proj.weight")):
            w[k] = w[k][:HEAD_DIM].contiguous()
    names = {torch.float32: "F32", torch.int64: "I64", torch.int32: "I32"}
    header, blobs, off = {}, [], 0
    for k, t in w.items():
        b = t.numpy().tobytes()
        header[k] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return 0


def cmd_cond(a):
    m = T3Mtl(a.ckpt)
    text, spk, prompt = load_inputs(a.inp, a.no_prompt)
    with torch.no_grad():
        ref = m.cond(spk, prompt, a.exaggeration).numpy()
    got = np.load(a.cond)
    if got.shape != ref.shape:
        print(f"FAIL cond: shape {got.shape} != reference {ref.shape}")
        return 1
    e = rel_err(got, ref)
    print(f"cond tokens {ref.shape}: rel err {e:.3g} (tol {a.rtol})")
    return 0 if e <= a.rtol else 1


def cmd_greedy(a):
    m = T3Mtl(a.ckpt)
    text, spk, prompt = load_inputs(a.inp)
    got_l = np.load(a.logits)  # [n, B, V]
    got_g = np.load(a.guided) if a.guided else None
    got_t = np.load(a.tokens).astype(np.int64).tolist() if a.tokens else []
    n_rows = got_l.shape[1]
    want_rows = 2 if a.cfg_weight > 0 else 1
    if n_rows != want_rows:
        print(f"FAIL: C++ ran {n_rows} rows, expected {want_rows} for cfg_weight {a.cfg_weight}")
        return 1
    gen, worst, worst_g = [], 0.0, 0.0
    steps = 1 if a.prefill_only else a.steps
    with torch.no_grad():
        cond = m.cond(spk, prompt, a.exaggeration)
        for i in range(steps):
            lg = m.logits(m.embeds(cond, text, gen, a.cfg_weight))
            if i >= got_l.shape[0]:
                print(f"FAIL: C++ stopped after {got_l.shape[0]} steps, reference continues at step {i}")
                return 1
            e = rel_err(got_l[i, 0], lg[0].numpy())
            if n_rows == 2:
                e = max(e, rel_err(got_l[i, 1], lg[1].numpy()))
            worst = max(worst, e)
            if e > a.rtol:
                print(f"FAIL step {i}: raw logits rel err {e:.3g} > {a.rtol}")
                return 1
            guided, proc = chain(lg[0:1], lg[1:2], [SOS] + gen, a.cfg_weight, TEMPERATURE, MIN_P, TOP_P, REP)
            if got_g is not None:
                eg = rel_err(got_g[i], guided[0].numpy())
                worst_g = max(worst_g, eg)
                if eg > a.rtol:
                    print(f"FAIL step {i}: CFG logits rel err {eg:.3g} > {a.rtol}")
                    return 1
            if a.prefill_only:
                break
            tok = int(torch.argmax(proc[0]))
            gen.append(tok)
            if i < len(got_t) and got_t[i] != tok:
                print(f"FAIL step {i}: C++ token {got_t[i]} != reference {tok}")
                return 1
            if tok == EOS:
                break
    if not a.prefill_only:
        if len(got_t) != len(gen):
            print(f"FAIL: C++ gave {len(got_t)} tokens, reference {len(gen)}")
            return 1
        if len(gen) < a.min_tokens:
            print(f"FAIL: only {len(gen)} tokens (want >= {a.min_tokens}); the check is too weak")
            return 1
    print(f"greedy: {len(gen)} tokens identical, raw logits rel err <= {worst:.3g}, CFG logits <= {worst_g:.3g}"
          f" (tol {a.rtol})")
    return 0


def cmd_sampler(a):
    got_l = np.load(a.logits)
    got_p = np.load(a.processed)
    toks = np.load(a.tokens).astype(np.int64).tolist()
    n = got_l.shape[0]
    if len(toks) != n or got_p.shape[0] != n:
        print(f"FAIL: {n} logit rows, {got_p.shape[0]} processed rows, {len(toks)} tokens")
        return 1
    worst, cut = 0.0, 0
    for i in range(n):
        c = torch.from_numpy(got_l[i, 0])[None]
        u = torch.from_numpy(got_l[i, 1])[None] if got_l.shape[1] == 2 else c
        _, ref = chain(c, u, [SOS] + toks[:i], a.cfg_weight, a.temperature, a.min_p, a.top_p, a.rep)
        ref = ref[0].numpy()
        kr, kg = np.isfinite(ref), np.isfinite(got_p[i])
        if not np.array_equal(kr, kg):
            print(f"FAIL step {i}: kept sets differ ({kr.sum()} reference vs {kg.sum()} C++)")
            return 1
        e = rel_err(got_p[i][kr], ref[kr])
        worst = max(worst, e)
        if e > 1e-5:
            print(f"FAIL step {i}: processed logits rel err {e:.3g}")
            return 1
        if not kr[toks[i]]:
            print(f"FAIL step {i}: sampled token {toks[i]} was filtered out")
            return 1
        cut += int((~kr).sum())
    if cut == 0 and (a.min_p > 0 or a.top_p < 1):
        print("FAIL: no logit was filtered; the check is too weak")
        return 1
    print(f"sampler: {n} steps, same kept sets ({cut} filtered in all), values rel err <= {worst:.3g}")
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("inputs")
    p.add_argument("ckpt")
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-text", type=int, default=20)
    p.add_argument("--n-prompt", type=int, default=50)
    p = sub.add_parser("gqa")
    p.add_argument("ckpt")
    p.add_argument("out")
    p = sub.add_parser("cond")
    p.add_argument("ckpt")
    p.add_argument("inp")
    p.add_argument("--cond", required=True)
    p.add_argument("--exaggeration", type=float, default=EXAGGERATION)
    p.add_argument("--no-prompt", action="store_true")
    p.add_argument("--rtol", type=float, default=1e-5)
    p = sub.add_parser("greedy")
    p.add_argument("ckpt")
    p.add_argument("inp")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--logits", required=True)
    p.add_argument("--guided")
    p.add_argument("--tokens")
    p.add_argument("--cfg-weight", type=float, default=CFG)
    p.add_argument("--exaggeration", type=float, default=EXAGGERATION)
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--min-tokens", type=int, default=1)
    p.add_argument("--prefill-only", action="store_true")
    p = sub.add_parser("sampler")
    p.add_argument("ckpt")
    p.add_argument("inp")
    p.add_argument("--logits", required=True)
    p.add_argument("--tokens", required=True)
    p.add_argument("--processed", required=True)
    p.add_argument("--cfg-weight", type=float, default=CFG)
    p.add_argument("--temperature", type=float, default=TEMPERATURE)
    p.add_argument("--min-p", type=float, default=MIN_P)
    p.add_argument("--top-p", type=float, default=TOP_P)
    p.add_argument("--rep", type=float, default=REP)
    a = ap.parse_args()
    torch.set_num_threads(2)
    return {"inputs": cmd_inputs, "gqa": cmd_gqa, "cond": cmd_cond, "greedy": cmd_greedy, "sampler": cmd_sampler}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
