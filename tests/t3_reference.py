#!/usr/bin/python3
"""PyTorch reference of T3 Turbo / Nano (GPT-2 medium / small backbone, t3.py inference_turbo)
built from torch primitives on the upstream-format t3_turbo_v1.safetensors or
t3_nano_v1.safetensors (whichever CKPT_DIR holds), for tests/test_t3_parity.sh.

  t3_reference.py inputs CKPT_DIR OUT_DIR --seed N --n-text L --n-prompt P
      random text ids, speaker embedding and prompt tokens (.npy) sized for the checkpoint
  t3_reference.py greedy CKPT_DIR IN_DIR --steps N --logits L.npy --tokens T.npy [--rtol R]
      greedy generation (full processor chain, argmax); compares logits and tokens
  t3_reference.py sampler CKPT_DIR IN_DIR --logits L.npy --tokens T.npy --processed P.npy
      applies the HF processor chain to the C++ raw logits with the C++ token history and
      compares the processed logits; checks each sampled token was allowed
  t3_reference.py prefill CKPT_DIR IN_DIR --logits L.npy --rtol R
      compares only the prefill row (for the F16 KV cache)

Exit 0 on success, 1 on a mismatch (with a message).
"""
import argparse
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
SOS, EOS = 6561, 6562
# tts_turbo.py generate() defaults
TEMPERATURE, TOP_K, TOP_P, REP = 0.8, 1000, 0.95, 1.2


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
        out[name] = t.reshape(info["shape"]).float() if dt in (torch.float16, torch.bfloat16) else t.reshape(info["shape"])
    return out


def t3_file(ckpt_dir):
    """The checkpoint's T3 file: Turbo's or Nano's (same pipeline, GPT-2 medium vs small)."""
    found = [n for n in ("t3_turbo_v1.safetensors", "t3_nano_v1.safetensors")
             if os.path.exists(os.path.join(ckpt_dir, n))]
    if len(found) != 1:
        raise SystemExit("t3_reference: %s holds %s, expected exactly one Turbo or Nano T3 file" % (ckpt_dir, found))
    return os.path.join(ckpt_dir, found[0])


class T3Turbo:
    """GPT2Model(inputs_embeds) + speech_head, HF semantics: Conv1D weights are [in, out]."""

    def __init__(self, ckpt_dir):
        self.w = load_safetensors(t3_file(ckpt_dir))
        w = self.w
        self.n_layer = len([k for k in w if k.startswith("tfmr.h.") and k.endswith(".ln_1.weight")])
        self.d = w["tfmr.wpe.weight"].shape[1]
        self.head_dim = 64
        self.n_head = self.d // self.head_dim
        self.eps = 1e-5

    def reset(self):
        self.past = [None] * self.n_layer
        self.n_past = 0

    @staticmethod
    def gelu_new(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    def forward(self, embeds, capture=None):
        """embeds: [T, d] -> speech logits of the last row [V]; extends the KV cache."""
        w, d, H, D = self.w, self.d, self.n_head, self.head_dim
        T = embeds.shape[0]
        pos = torch.arange(self.n_past, self.n_past + T)
        x = embeds + w["tfmr.wpe.weight"][pos]
        if capture is not None:
            capture["inp"] = x.clone()
        Tk = self.n_past + T
        # causal: query i (absolute n_past + i) sees keys j <= n_past + i
        mask = torch.arange(Tk)[None, :] > (self.n_past + torch.arange(T))[:, None]
        for i in range(self.n_layer):
            p = "tfmr.h.%d." % i
            h = F.layer_norm(x, (d,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], self.eps)
            qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
            q, k, v = qkv.split(d, dim=-1)
            q = q.reshape(T, H, D).transpose(0, 1)
            k = k.reshape(T, H, D).transpose(0, 1)
            v = v.reshape(T, H, D).transpose(0, 1)
            if self.past[i] is not None:
                k = torch.cat([self.past[i][0], k], dim=1)
                v = torch.cat([self.past[i][1], v], dim=1)
            self.past[i] = (k, v)
            s = (q @ k.transpose(1, 2)) / math.sqrt(D)
            s = s.masked_fill(mask[None], float("-inf"))
            a = torch.softmax(s, dim=-1) @ v
            a = a.transpose(0, 1).reshape(T, d)
            x = x + a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            if capture is not None:
                capture["attn_out.%d" % i] = x.clone()
            h = F.layer_norm(x, (d,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], self.eps)
            f = self.gelu_new(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
            x = x + f @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
            if capture is not None:
                capture["l_out.%d" % i] = x.clone()
        self.n_past += T
        hf = F.layer_norm(x[-1:], (d,), w["tfmr.ln_f.weight"], w["tfmr.ln_f.bias"], self.eps)
        logits = hf @ w["speech_head.weight"].t()
        if "speech_head.bias" in w:
            logits = logits + w["speech_head.bias"]
        return logits[0]

    def prompt(self, text_ids, speaker_emb, prompt_tokens):
        w = self.w
        spk = speaker_emb.reshape(1, -1) @ w["cond_enc.spkr_enc.weight"].t() + w["cond_enc.spkr_enc.bias"]
        parts = [spk, w["speech_emb.weight"][prompt_tokens], w["text_emb.weight"][text_ids],
                 w["speech_emb.weight"][torch.tensor([SOS])]]
        return torch.cat(parts, dim=0)


# ---- HF logits processors (transformers semantics), Turbo order ----
def temperature(scores, t):
    return scores / t


def top_k(scores, k):
    k = min(max(k, 1), scores.shape[-1])
    kth = torch.topk(scores, k)[0][..., -1, None]
    return scores.masked_fill(scores < kth, float("-inf"))


def top_p(scores, p):
    sorted_logits, sorted_idx = torch.sort(scores, descending=False)
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cum <= (1 - p)
    remove[..., -1:] = 0
    remove = remove.scatter(-1, sorted_idx, remove)
    return scores.masked_fill(remove, float("-inf"))


def repetition(scores, ids, r):
    ids = torch.as_tensor(ids, dtype=torch.long)
    s = torch.gather(scores, -1, ids)
    s = torch.where(s < 0, s * r, s / r)
    return scores.scatter(-1, ids, s)


def process(logits, history, t=TEMPERATURE, k=TOP_K, p=TOP_P, r=REP):
    s = logits.reshape(1, -1).clone()
    if t > 0 and t != 1.0:
        s = temperature(s, t)
    if k > 0:
        s = top_k(s, k)
    if p < 1.0:
        s = top_p(s, p)
    if r != 1.0:
        s = repetition(s, torch.tensor([history], dtype=torch.long), r)
    return s[0]


def load_inputs(d):
    text = torch.from_numpy(np.load(os.path.join(d, "text.npy")).astype(np.int64))
    spk = torch.from_numpy(np.load(os.path.join(d, "speaker.npy")).astype(np.float32))
    prm = torch.from_numpy(np.load(os.path.join(d, "prompt.npy")).astype(np.int64))
    return text, spk, prm


def rel_err(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def cmd_inputs(a):
    hdr_path = t3_file(a.ckpt)
    with open(hdr_path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
    text_vocab = hdr["text_emb.weight"]["shape"][0]
    spk_size = hdr["cond_enc.spkr_enc.weight"]["shape"][1]
    rng = np.random.default_rng(a.seed)
    np.save(os.path.join(a.out, "text.npy"), rng.integers(0, text_vocab, a.n_text).astype(np.int32))
    np.save(os.path.join(a.out, "speaker.npy"), rng.standard_normal(spk_size).astype(np.float32))
    np.save(os.path.join(a.out, "prompt.npy"), rng.integers(0, 6561, a.n_prompt).astype(np.int32))
    return 0


def cmd_greedy(a):
    torch.set_grad_enabled(False)
    m = T3Turbo(a.ckpt)
    text, spk, prm = load_inputs(a.inputs)
    m.reset()
    cap = {}
    logits = m.forward(m.prompt(text, spk, prm), capture=cap)
    rows = [logits.numpy().copy()]
    toks = [int(torch.argmax(process(logits, [SOS])))]
    for _ in range(a.steps):
        lg = m.forward(m.w["speech_emb.weight"][torch.tensor([toks[-1]])])
        rows.append(lg.numpy().copy())
        s = process(lg, toks)
        if bool(torch.all(s == float("-inf"))):
            break
        toks.append(int(torch.argmax(s)))
        if toks[-1] == EOS:
            break
    if toks and toks[-1] == EOS:
        toks = toks[:-1]
    ref_logits = np.stack(rows)
    ref_toks = np.array(toks, dtype=np.int32)

    cpp_logits = np.load(a.logits)
    cpp_toks = np.load(a.tokens).astype(np.int32)
    ok = True
    if a.dump_dir:  # layer-by-layer diagnostics for the prefill
        for name, t in cap.items():
            path = os.path.join(a.dump_dir, name + ".npy")
            if os.path.exists(path):
                print("  prefill %-12s rel %.3g" % (name, rel_err(np.load(path), t.numpy())))
    n_same = 0
    while n_same < min(len(ref_toks), len(cpp_toks)) and ref_toks[n_same] == cpp_toks[n_same]:
        n_same += 1
    print("greedy tokens: reference %d, c++ %d, identical prefix %d" % (len(ref_toks), len(cpp_toks), n_same))
    if len(ref_toks) != len(cpp_toks) or n_same != len(ref_toks):
        print("FAIL: greedy tokens differ at step %d" % n_same)
        print("  ref", ref_toks[:n_same + 5].tolist())
        print("  c++", cpp_toks[:n_same + 5].tolist())
        ok = False
    if len(ref_toks) < a.min_tokens:
        print("FAIL: only %d greedy tokens (expected >= %d)" % (len(ref_toks), a.min_tokens))
        ok = False
    n = min(len(ref_logits), len(cpp_logits), n_same + 1)
    if cpp_logits.shape[1] != ref_logits.shape[1]:
        print("FAIL: logits width %d vs %d" % (cpp_logits.shape[1], ref_logits.shape[1]))
        return 1
    errs = [rel_err(cpp_logits[i], ref_logits[i]) for i in range(n)]
    worst = int(np.argmax(errs))
    print("logits rel err (max|diff| / max|ref|): prefill %.3g, max over %d rows %.3g (row %d), rtol %.1g"
          % (errs[0], n, errs[worst], worst, a.rtol))
    if errs[worst] > a.rtol:
        print("FAIL: logits rel err %.3g > %.1g" % (errs[worst], a.rtol))
        ok = False
    # the greedy margin: how close the decisions were (diagnostic)
    return 0 if ok else 1


def cmd_prefill(a):
    torch.set_grad_enabled(False)
    m = T3Turbo(a.ckpt)
    text, spk, prm = load_inputs(a.inputs)
    m.reset()
    ref = m.forward(m.prompt(text, spk, prm)).numpy()
    cpp = np.load(a.logits)[0]
    e = rel_err(cpp, ref)
    print("prefill logits rel err %.3g (rtol %.1g)" % (e, a.rtol))
    return 0 if e <= a.rtol else 1


def cmd_sampler(a):
    torch.set_grad_enabled(False)
    raw = np.load(a.logits)
    toks = np.load(a.tokens).astype(np.int64).tolist()
    proc = np.load(a.processed)
    ok = True
    worst = 0.0
    n_rows = proc.shape[0]
    for i in range(n_rows):
        hist = [SOS] if i == 0 else toks[:i]
        ref = process(torch.from_numpy(raw[i]), hist, a.temperature, a.top_k, a.top_p, a.rep).numpy()
        got = proc[i]
        ref_inf, got_inf = np.isneginf(ref), np.isneginf(got)
        if not np.array_equal(ref_inf, got_inf):
            d = np.nonzero(ref_inf != got_inf)[0]
            print("FAIL: step %d: kept sets differ at %d ids (first %d: ref %g, c++ %g); kept ref %d c++ %d"
                  % (i, len(d), d[0], ref[d[0]], got[d[0]], (~ref_inf).sum(), (~got_inf).sum()))
            ok = False
            continue
        fin = ~ref_inf
        worst = max(worst, float(np.abs(ref[fin] - got[fin]).max() / max(np.abs(ref[fin]).max(), 1e-30)))
        if i < len(toks) and not fin[toks[i]]:
            print("FAIL: step %d sampled token %d that the processors removed" % (i, toks[i]))
            ok = False
    kept = [int((~np.isneginf(proc[i])).sum()) for i in range(n_rows)]
    print("sampler: %d steps, processed logits rel err %.3g, kept per step min %d max %d"
          % (n_rows, worst, min(kept), max(kept)))
    if worst > 1e-6:
        print("FAIL: processed logits rel err %.3g > 1e-6" % worst)
        ok = False
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("inputs")
    p.add_argument("ckpt"); p.add_argument("out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-text", type=int, default=23)
    p.add_argument("--n-prompt", type=int, default=150)
    p = sub.add_parser("greedy")
    p.add_argument("ckpt"); p.add_argument("inputs")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--logits", required=True); p.add_argument("--tokens", required=True)
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--min-tokens", type=int, default=0)
    p.add_argument("--dump-dir", default="")
    p = sub.add_parser("prefill")
    p.add_argument("ckpt"); p.add_argument("inputs")
    p.add_argument("--logits", required=True)
    p.add_argument("--rtol", type=float, default=1e-2)
    p = sub.add_parser("sampler")
    p.add_argument("ckpt"); p.add_argument("inputs")
    p.add_argument("--logits", required=True); p.add_argument("--tokens", required=True)
    p.add_argument("--processed", required=True)
    p.add_argument("--temperature", type=float, default=TEMPERATURE)
    p.add_argument("--top-k", type=int, default=TOP_K)
    p.add_argument("--top-p", type=float, default=TOP_P)
    p.add_argument("--rep", type=float, default=REP)
    a = ap.parse_args()
    return {"inputs": cmd_inputs, "greedy": cmd_greedy, "prefill": cmd_prefill, "sampler": cmd_sampler}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
