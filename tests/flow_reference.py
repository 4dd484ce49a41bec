#!/usr/bin/python3
"""PyTorch reference of the S3Gen flow front + UpsampleConformerEncoder (flow.py `inference` up to
the CFM call; transformer/upsample_encoder.py, encoder_layer.py, attention.py
RelPositionMultiHeadedAttention, embedding.py EspnetRelPositionalEncoding), written from torch
primitives on the upstream-format s3gen_meanflow.safetensors, for tests/test_flow_parity.sh.

  flow_reference.py inputs CKPT_DIR OUT_DIR --seed N --n-tokens N --n-prompt P --n-frames TM
      random speech tokens, prompt tokens, prompt mel [TM, 80] and x-vector (.npy)
  flow_reference.py voice-inputs CKPT_DIR OUT_DIR
      overwrites the prompt tokens, prompt mel and x-vector with conds.pt `gen` (built-in voice)
  flow_reference.py compare CKPT_DIR IN_DIR --mu MU.npy --cond C.npy --spks S.npy
                            [--dump-dir DIR] [--rtol R]
      runs the reference and compares; with --dump-dir also every named intermediate that the
      C++ side dumped (rel. error printed, checked against the same tolerance)

Relative error = max|cpp - ref| / max|ref|. Exit 0 on success, 1 on a mismatch.
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
PREFIX = "flow."


def load_safetensors(path, prefix):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
        base = 8 + n
        out = {}
        for name, info in header.items():
            if name == "__metadata__" or not name.startswith(prefix):
                continue
            b, e = info["data_offsets"]
            dt = DTYPES[info["dtype"]]
            f.seek(base + b)
            buf = bytearray(f.read(e - b))
            t = torch.frombuffer(buf, dtype=dt) if e > b else torch.empty(0, dtype=dt)
            t = t.reshape(info["shape"])
            out[name[len(prefix):]] = t.float() if dt in (torch.float16, torch.bfloat16) else t
    return out


class RelPositionalEncoding:
    """EspnetRelPositionalEncoding: table built for max_len 5000 (extended when longer)."""

    def __init__(self, d_model, max_len=5000):
        self.d = d_model
        self.xscale = math.sqrt(d_model)
        self.pe = None
        self.extend(max_len)

    def extend(self, n):
        if self.pe is not None and self.pe.size(1) >= n * 2 - 1:
            return
        pos_p = torch.zeros(n, self.d)
        pos_n = torch.zeros(n, self.d)
        position = torch.arange(0, n, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, self.d, 2, dtype=torch.float32) * -(math.log(10000.0) / self.d))
        pos_p[:, 0::2] = torch.sin(position * div_term)
        pos_p[:, 1::2] = torch.cos(position * div_term)
        pos_n[:, 0::2] = torch.sin(-1 * position * div_term)
        pos_n[:, 1::2] = torch.cos(-1 * position * div_term)
        self.pe = torch.cat([torch.flip(pos_p, [0]).unsqueeze(0), pos_n[1:].unsqueeze(0)], dim=1)

    def __call__(self, x):
        """x: [1, T, d] -> (x * sqrt(d), pos_emb [1, 2T-1, d])"""
        T = x.size(1)
        self.extend(T)
        c = self.pe.size(1) // 2
        return x * self.xscale, self.pe[:, c - T + 1:c + T]


def rel_shift(x):
    """ESPnet rel_shift on (B, H, T1, 2T1-1) scores, the zero-pad + view trick as upstream."""
    zero_pad = torch.zeros((x.size(0), x.size(1), x.size(2), 1), dtype=x.dtype)
    x_padded = torch.cat([zero_pad, x], dim=-1)
    x_padded = x_padded.view(x.size(0), x.size(1), x.size(3) + 1, x.size(2))
    return x_padded[:, :, 1:].view_as(x)[:, :, :, : x.size(-1) // 2 + 1]


class FlowEncoderRef:
    def __init__(self, ckpt_dir):
        self.w = load_safetensors(os.path.join(ckpt_dir, "s3gen_meanflow.safetensors"), PREFIX)
        w = self.w
        self.d = w["input_embedding.weight"].shape[1]
        self.H, self.D = w["encoder.encoders.0.self_attn.pos_bias_u"].shape
        self.n_enc = len([k for k in w if k.startswith("encoder.encoders.") and k.endswith(".norm_ff.weight")])
        self.n_up = len([k for k in w if k.startswith("encoder.up_encoders.") and k.endswith(".norm_ff.weight")])
        self.lookahead = w["encoder.pre_lookahead_layer.conv1.weight"].shape[2] - 1
        self.stride = (w["encoder.up_layer.conv.weight"].shape[2] - 1) // 2
        self.pos_enc = RelPositionalEncoding(self.d)
        self.up_pos_enc = RelPositionalEncoding(self.d)

    def lin(self, x, name, bias=True):
        y = x @ self.w[name + ".weight"].t()
        return y + self.w[name + ".bias"] if bias else y

    def ln(self, x, name, eps):
        return F.layer_norm(x, (self.d,), self.w[name + ".weight"], self.w[name + ".bias"], eps)

    def embed(self, x, name, pos_enc):
        x = self.ln(self.lin(x, name + ".out.0"), name + ".out.1", 1e-5)
        return pos_enc(x)

    def rel_attn(self, x, pos_emb, p):
        B, T, _ = x.shape
        H, D = self.H, self.D
        q = self.lin(x, p + "linear_q").view(B, -1, H, D)              # (B, T, H, D)
        k = self.lin(x, p + "linear_k").view(B, -1, H, D).transpose(1, 2)
        v = self.lin(x, p + "linear_v").view(B, -1, H, D).transpose(1, 2)
        pp = self.lin(pos_emb, p + "linear_pos", bias=False).view(pos_emb.size(0), -1, H, D).transpose(1, 2)
        q_u = (q + self.w[p + "pos_bias_u"]).transpose(1, 2)
        q_v = (q + self.w[p + "pos_bias_v"]).transpose(1, 2)
        ac = torch.matmul(q_u, k.transpose(-2, -1))
        bd = torch.matmul(q_v, pp.transpose(-2, -1))
        if ac.shape != bd.shape:
            bd = rel_shift(bd)
        scores = (ac + bd) / math.sqrt(D)
        mask = torch.ones(B, 1, T, dtype=torch.bool).unsqueeze(1).eq(0)  # no padding (batch of one)
        scores = scores.masked_fill(mask, -float("inf"))
        attn = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
        o = torch.matmul(attn, v).transpose(1, 2).contiguous().view(B, -1, H * D)
        return self.lin(o, p + "linear_out")

    def layer(self, x, pos_emb, p):
        x = x + self.rel_attn(self.ln(x, p + "norm_mha", 1e-12), pos_emb, p + "self_attn.")
        attn = x
        h = F.silu(self.lin(self.ln(x, p + "norm_ff", 1e-12), p + "feed_forward.w_1"))
        return x + self.lin(h, p + "feed_forward.w_2"), attn

    def forward(self, tokens, prompt_tokens, prompt_feat, embedding, cap):
        w = self.w
        emb = F.normalize(embedding.reshape(1, -1), dim=1)
        spks = self.lin(emb, "spk_embed_affine_layer")                 # (1, 80)
        cap["flow_encoder.spks"] = spks[0]
        tok = torch.cat([prompt_tokens.reshape(1, -1), tokens.reshape(1, -1)], dim=1).long()
        L = tok.shape[1]
        mask = torch.ones(1, L, 1)
        x = w["input_embedding.weight"][tok] * mask                    # (1, L, d)
        cap["flow_encoder.embedding"] = x[0]
        x, pos = self.embed(x, "encoder.embed", self.pos_enc)
        cap["flow_encoder.embed"] = x[0]
        cap["flow_encoder.pos_emb"] = pos[0]
        # PreLookaheadLayer
        y = x.transpose(1, 2)
        y = F.pad(y, (0, self.lookahead))
        y = F.leaky_relu(F.conv1d(y, w["encoder.pre_lookahead_layer.conv1.weight"],
                                  w["encoder.pre_lookahead_layer.conv1.bias"]))
        y = F.pad(y, (2, 0))
        y = F.conv1d(y, w["encoder.pre_lookahead_layer.conv2.weight"], w["encoder.pre_lookahead_layer.conv2.bias"])
        x = y.transpose(1, 2) + x
        cap["flow_encoder.pre_lookahead"] = x[0]
        for i in range(self.n_enc):
            x, a = self.layer(x, pos, "encoder.encoders.%d." % i)
            cap["flow_encoder.layer%d.attn" % i] = a[0]
            cap["flow_encoder.layer%d.out" % i] = x[0]
        # Upsample1D
        y = F.interpolate(x.transpose(1, 2), scale_factor=float(self.stride), mode="nearest")
        y = F.pad(y, (self.stride * 2, 0), value=0.0)
        y = F.conv1d(y, w["encoder.up_layer.conv.weight"], w["encoder.up_layer.conv.bias"])
        x = y.transpose(1, 2)
        cap["flow_encoder.up_layer"] = x[0]
        x, pos = self.embed(x, "encoder.up_embed", self.up_pos_enc)
        cap["flow_encoder.up_embed"] = x[0]
        cap["flow_encoder.up_pos_emb"] = pos[0]
        for i in range(self.n_up):
            x, a = self.layer(x, pos, "encoder.up_encoders.%d." % i)
            cap["flow_encoder.up_layer%d.attn" % i] = a[0]
            cap["flow_encoder.up_layer%d.out" % i] = x[0]
        x = self.ln(x, "encoder.after_norm", 1e-5)
        cap["flow_encoder.after_norm"] = x[0]
        h = self.lin(x, "encoder_proj")                                # (1, 2L, 80)
        Tm = prompt_feat.shape[0]
        conds = torch.zeros(1, h.shape[1], h.shape[2])
        conds[:, :Tm] = prompt_feat
        mu = h.transpose(1, 2)[0]
        cond = conds.transpose(1, 2)[0]
        cap["flow_encoder.mu"] = mu
        cap["flow_encoder.cond"] = cond
        return mu, cond, spks[0]


def rel_err(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def cmd_inputs(a):
    w = load_safetensors(os.path.join(a.ckpt, "s3gen_meanflow.safetensors"), PREFIX)
    vocab = w["input_embedding.weight"].shape[0]
    mel = w["encoder_proj.weight"].shape[0]
    spk = w["spk_embed_affine_layer.weight"].shape[1]
    g = torch.Generator().manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    np.save(os.path.join(a.out, "tokens.npy"),
            torch.randint(0, vocab, (a.n_tokens,), generator=g).to(torch.int32).numpy())
    np.save(os.path.join(a.out, "prompt_tokens.npy"),
            torch.randint(0, vocab, (a.n_prompt,), generator=g).to(torch.int32).numpy())
    np.save(os.path.join(a.out, "prompt_feat.npy"), (torch.randn(a.n_frames, mel, generator=g) * 2 - 5).numpy())
    np.save(os.path.join(a.out, "embedding.npy"), torch.randn(spk, generator=g).numpy())


def cmd_voice_inputs(a):
    """The built-in voice: conds.pt `gen` (prompt_token, prompt_feat, embedding), batch dim dropped."""
    gen = torch.load(os.path.join(a.ckpt, "conds.pt"), map_location="cpu")["gen"]
    np.save(os.path.join(a.out, "prompt_tokens.npy"), gen["prompt_token"].reshape(-1).to(torch.int32).numpy())
    feat = gen["prompt_feat"]
    np.save(os.path.join(a.out, "prompt_feat.npy"), feat.reshape(feat.shape[-2], feat.shape[-1]).float().numpy())
    np.save(os.path.join(a.out, "embedding.npy"), gen["embedding"].reshape(-1).float().numpy())


def cmd_compare(a):
    torch.set_num_threads(2)
    ld = lambda n: torch.from_numpy(np.load(os.path.join(a.inputs, n)))
    ref = FlowEncoderRef(a.ckpt)
    cap = {}
    with torch.no_grad():
        mu, cond, spks = ref.forward(ld("tokens.npy"), ld("prompt_tokens.npy"), ld("prompt_feat.npy"),
                                     ld("embedding.npy"), cap)
    ok = True

    def check(name, got, want, tol):
        nonlocal ok
        if got.shape != want.shape:
            print("FAIL %-34s shape %s, reference %s" % (name, got.shape, want.shape))
            ok = False
            return
        e = rel_err(got, want)
        bad = not (e <= tol)
        print("%s %-34s rel %.3g (tol %.0e)  max|ref| %.3g" % ("FAIL" if bad else "ok  ", name, e, tol,
                                                                float(np.max(np.abs(want)))))
        ok = ok and not bad

    if a.dump_dir:
        for name, t in cap.items():
            p = os.path.join(a.dump_dir, name + ".npy")
            if not os.path.exists(p):
                print("FAIL %-34s not dumped by the C++ side" % name)
                ok = False
                continue
            check(name, np.load(p), t.numpy(), a.rtol)
    check("mu", np.load(a.mu), mu.numpy(), a.rtol)
    c_got, c_ref = np.load(a.cond), cond.numpy()
    if c_got.shape != c_ref.shape or not np.array_equal(c_got, c_ref):
        print("FAIL cond differs from prompt_feat^T + zeros")
        ok = False
    else:
        print("ok   cond exact, shape %s" % (c_ref.shape,))
    check("spks", np.load(a.spks), spks.numpy(), a.rtol)
    print("frames %d (L = %d tokens)" % (mu.shape[1], mu.shape[1] // ref.stride))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("inputs")
    p.add_argument("ckpt")
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-tokens", type=int, default=40)
    p.add_argument("--n-prompt", type=int, default=25)
    p.add_argument("--n-frames", type=int, default=50)
    p = sub.add_parser("voice-inputs")
    p.add_argument("ckpt")
    p.add_argument("out")
    p = sub.add_parser("compare")
    p.add_argument("ckpt")
    p.add_argument("inputs")
    p.add_argument("--mu", required=True)
    p.add_argument("--cond", required=True)
    p.add_argument("--spks", required=True)
    p.add_argument("--dump-dir")
    p.add_argument("--rtol", type=float, default=1e-4)
    a = ap.parse_args()
    if a.cmd == "inputs":
        cmd_inputs(a)
        return 0
    if a.cmd == "voice-inputs":
        cmd_voice_inputs(a)
        return 0
    return cmd_compare(a)


if __name__ == "__main__":
    sys.exit(main())
