#!/usr/bin/python3
"""PyTorch reference of the S3Gen CFM (upstream models/s3gen/flow_matching.py CausalConditionalCFM,
decoder.py ConditionalDecoder with matcha/decoder.py and the diffusers BasicTransformerBlock of
matcha/transformer.py; spec §8.3-8.4), written from torch primitives on the upstream-format
checkpoint (Turbo: s3gen_meanflow.safetensors; Multilingual: s3gen.pt), for
tests/test_cfm_parity.sh.

  cfm_reference.py inputs OUT_DIR --seed N --prompt P --gen G
      mu.npy [80, T], cond.npy [80, T] (a prompt mel in the first P frames, zeros after),
      spks.npy [80] and noise.npy [80, T] ~ N(0, 1), T = P + G
  cfm_reference.py check CKPT_DIR IN_DIR --steps PFX --mel MEL.npy [--dump-dir D] [--rtol R] [--valid N]
      runs the solver of the checkpoint's variant (meanflow: 2 Euler steps on [0, 0.5, 1];
      otherwise 10 cosine-scheduled Euler steps with CFG 0.7 as a batch of two) from the shared
      noise and compares the C++ state after each step (PFX.K.npy), the mel (prompt frames
      dropped) and, with --dump-dir, the intermediates of the first estimator call.
      --valid N masks frames N.. as upstream's length mask would (mask_to_bias on the keys,
      x * mask in the blocks). Error measure: max|c++ - ref| / max|ref|.

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

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}
PREFIX = "flow.decoder.estimator."
MEL = 80
HEAD_DIM = 64          # attention_head_dim (s3gen.py)
LN_EPS = 1e-5          # nn.LayerNorm default
CFG_RATE = 0.7         # CFM_PARAMS inference_cfg_rate (configs.py)


def load_estimator(ckpt_dir):
    st = os.path.join(ckpt_dir, "s3gen_meanflow.safetensors")
    out = {}
    if os.path.exists(st):
        with open(st, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n).decode("utf-8"))
            raw = f.read()
        for name, info in header.items():
            if not name.startswith(PREFIX):
                continue
            b, e = info["data_offsets"]
            t = torch.frombuffer(bytearray(raw[b:e]), dtype=DTYPES[info["dtype"]])
            out[name[len(PREFIX):]] = t.reshape(info["shape"]).float()
        return out
    sd = torch.load(os.path.join(ckpt_dir, "s3gen.pt"), map_location="cpu", weights_only=True)
    for name, t in sd.items():
        if name.startswith(PREFIX):
            out[name[len(PREFIX):]] = t.float()
    return out


class Estimator:
    def __init__(self, w):
        self.w = w
        self.meanflow = "time_embed_mixer.weight" in w
        self.C = w["final_proj.weight"].shape[1]
        self.n_blocks = len({k.split(".")[3] for k in w if k.startswith("down_blocks.0.1.")})
        self.n_mid = len({k.split(".")[1] for k in w if k.startswith("mid_blocks.")})
        self.heads = w["down_blocks.0.1.0.attn1.to_q.weight"].shape[0] // HEAD_DIM
        self.sin_dim = w["time_mlp.linear_1.weight"].shape[1]
        self.capture = None

    def emit(self, name, t):
        if self.capture is not None:
            self.capture[name] = t.detach().clone()

    def lin(self, x, p, bias=True):
        return F.linear(x, self.w[p + ".weight"], self.w[p + ".bias"] if bias else None)

    def sinusoid(self, t):  # SinusoidalPosEmb(in_channels), scale 1000
        half = self.sin_dim // 2
        emb = math.log(10000) / (half - 1)
        emb = torch.exp(torch.arange(half).float() * -emb)
        emb = 1000 * t.unsqueeze(1) * emb.unsqueeze(0)
        return torch.cat((emb.sin(), emb.cos()), dim=-1)

    def time_mlp(self, t):
        return self.lin(F.silu(self.lin(self.sinusoid(t), "time_mlp.linear_1")), "time_mlp.linear_2")

    def causal_conv(self, x, p):
        w = self.w[p + ".weight"]
        return F.conv1d(F.pad(x, (w.shape[2] - 1, 0)), w, self.w[p + ".bias"])

    def causal_block(self, x, mask, p):
        y = self.causal_conv(x * mask, p + ".block.0")
        y = F.layer_norm(y.transpose(1, 2), (y.shape[1],), self.w[p + ".block.2.weight"],
                         self.w[p + ".block.2.bias"], LN_EPS).transpose(1, 2)
        return F.mish(y) * mask

    def resnet(self, x, mask, temb, p):
        h = self.causal_block(x, mask, p + ".block1")
        h = h + self.lin(F.mish(temb), p + ".mlp.1").unsqueeze(-1)
        h = self.causal_block(h, mask, p + ".block2")
        return h + F.conv1d(x * mask, self.w[p + ".res_conv.weight"], self.w[p + ".res_conv.bias"])

    def transformer(self, x, bias, p):  # x: [B, T, C]; bias: [B, 1, T] (0 or -1e10 per key)
        B, T, C = x.shape
        H = self.heads
        n = F.layer_norm(x, (C,), self.w[p + ".norm1.weight"], self.w[p + ".norm1.bias"], LN_EPS)
        q, k, v = (F.linear(n, self.w[p + ".attn1.to_" + s + ".weight"]).view(B, T, H, -1).transpose(1, 2)
                   for s in "qkv")
        s = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5) + bias.unsqueeze(1)
        a = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, -1)
        x = x + self.lin(a, p + ".attn1.to_out.0")
        n = F.layer_norm(x, (C,), self.w[p + ".norm3.weight"], self.w[p + ".norm3.bias"], LN_EPS)
        return x + self.lin(F.gelu(self.lin(n, p + ".ff.net.0.proj")), p + ".ff.net.2")

    def stage(self, x, mask, temb, bias, p, name, idx=None):
        sfx = "" if idx is None else "." + str(idx)
        x = self.resnet(x, mask, temb, p + ".0")
        self.emit(name + ".resnet" + sfx, x)
        x = x.transpose(1, 2)
        for j in range(self.n_blocks):
            x = self.transformer(x, bias, "%s.1.%d" % (p, j))
        self.emit(name + ".tfm" + sfx, x)
        return x.transpose(1, 2)

    def __call__(self, x, mask, mu, t, spks, cond, r=None):
        temb = self.time_mlp(t)
        if self.meanflow:
            temb = F.linear(torch.cat([temb, self.time_mlp(r)], dim=1), self.w["time_embed_mixer.weight"])
        self.emit("temb", temb)
        T = x.shape[-1]
        x = torch.cat([x, mu, spks.unsqueeze(-1).expand(-1, -1, T), cond], dim=1)
        self.emit("x_in", x)
        bias = (1.0 - mask) * -1.0e10  # mask_to_bias of the padding mask, [B, 1, T]
        skip = self.stage(x, mask, temb, bias, "down_blocks.0", "down")
        x = self.causal_conv(skip * mask, "down_blocks.0.2")
        self.emit("down.out", x)
        for i in range(self.n_mid):
            x = self.stage(x, mask, temb, bias, "mid_blocks.%d" % i, "mid", i)
        x = self.stage(torch.cat([x, skip], dim=1), mask, temb, bias, "up_blocks.0", "up")
        x = self.causal_conv(x * mask, "up_blocks.0.2")
        self.emit("up.out", x)
        x = self.causal_block(x, mask, "final_block")
        self.emit("final_block", x)
        out = F.conv1d(x * mask, self.w["final_proj.weight"], self.w["final_proj.bias"]) * mask
        self.emit("out", out)
        return out


def solve(est, z, mask, mu, spks, cond, on_step):
    """CausalConditionalCFM.forward with the noise given: basic_euler (meanflow) or solve_euler."""
    meanflow = est.meanflow
    n = 2 if meanflow else 10  # s3gen.py flow_inference defaults
    t_span = torch.linspace(0, 1, n + 1)
    if not meanflow:
        t_span = 1 - torch.cos(t_span * 0.5 * torch.pi)
    x = z
    for k, (t, r) in enumerate(zip(t_span[:-1], t_span[1:])):
        t, r = t[None], r[None]
        if meanflow:
            dxdt = est(x, mask, mu, t, spks, cond, r)
        else:
            T = x.shape[2]
            x_in = torch.zeros([2, MEL, T]); mask_in = torch.zeros([2, 1, T]); mu_in = torch.zeros([2, MEL, T])
            t_in = torch.zeros([2]); spks_in = torch.zeros([2, MEL]); cond_in = torch.zeros([2, MEL, T])
            x_in[:1] = x_in[1:] = x
            mask_in[:1] = mask_in[1:] = mask
            mu_in[:1] = mu
            t_in[:1] = t_in[1:] = t
            spks_in[:1] = spks
            cond_in[:1] = cond
            dxdt = est(x_in, mask_in, mu_in, t_in, spks_in, cond_in)
            dxdt, cfg_dxdt = torch.split(dxdt, [1, 1], dim=0)
            dxdt = (1.0 + CFG_RATE) * dxdt - CFG_RATE * cfg_dxdt
        x = x + (r - t) * dxdt
        on_step(k, x)
    return x


def rel_err(c, r):
    c = np.asarray(c, dtype=np.float64).reshape(r.shape)
    r = np.asarray(r, dtype=np.float64)
    return float(np.abs(c - r).max() / max(np.abs(r).max(), 1e-30))


def cmd_inputs(a):
    os.makedirs(a.out_dir, exist_ok=True)
    g = np.random.default_rng(a.seed)
    T = a.prompt + a.gen
    mu = g.standard_normal((MEL, T)).astype(np.float32)
    cond = np.zeros((MEL, T), np.float32)
    # a smooth log-mel-like prompt (values around -5 with slow variation)
    tt = np.arange(a.prompt)[None, :] / 10.0
    ff = np.arange(MEL)[:, None] / 16.0
    cond[:, :a.prompt] = (-5 + 2 * np.sin(tt + ff) + 0.3 * g.standard_normal((MEL, a.prompt))).astype(np.float32)
    spks = (0.3 * g.standard_normal(MEL)).astype(np.float32)
    noise = g.standard_normal((MEL, T)).astype(np.float32)
    for name, arr in (("mu", mu), ("cond", cond), ("spks", spks), ("noise", noise)):
        np.save(os.path.join(a.out_dir, name + ".npy"), arr)


def cmd_check(a):
    torch.set_num_threads(2)
    est = Estimator(load_estimator(a.ckpt_dir))
    load = lambda n: torch.from_numpy(np.load(os.path.join(a.in_dir, n + ".npy")))
    mu, cond, spks, z = load("mu")[None], load("cond")[None], load("spks")[None], load("noise")[None]
    T = mu.shape[-1]
    prompt = int((cond[0].abs().sum(0) != 0).nonzero().max()) + 1
    mask = torch.ones(1, 1, T)
    if a.valid is not None:
        mask[..., a.valid:] = 0
    ok = True
    captured = {}
    est.capture = captured
    first = [True]

    def on_step(k, x):
        nonlocal ok
        if first[0]:
            est.capture = None
            first[0] = False
        c = np.load("%s.%d.npy" % (a.steps, k))
        e = rel_err(c, x[0].numpy())
        print("step %d: rel err %.3g" % (k, e))
        if not e <= a.rtol:
            ok = False

    with torch.no_grad():
        x = solve(est, z, mask, mu, spks, cond, on_step)
    mel = x[0, :, prompt:].numpy()
    c = np.load(a.mel)
    if c.shape != mel.shape:
        print("FAIL: mel shape %s, reference %s" % (c.shape, mel.shape))
        return 1
    e = rel_err(c, mel)
    print("mel [80, %d] (prompt %d dropped): rel err %.3g" % (mel.shape[1], prompt, e))
    ok = ok and e <= a.rtol
    if a.dump_dir:
        worst = 0.0
        for name, ref in captured.items():
            path = os.path.join(a.dump_dir, name + ".npy")
            if not os.path.exists(path):
                print("FAIL: intermediate %s was not dumped" % name)
                ok = False
                continue
            e = rel_err(np.load(path), ref.numpy())
            worst = max(worst, e)
            if not e <= a.rtol:
                print("FAIL: intermediate %s rel err %.3g" % (name, e))
                ok = False
        print("first estimator call: %d intermediates, worst rel err %.3g" % (len(captured), worst))
    if not ok:
        print("FAIL: tolerance %g exceeded" % a.rtol)
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("inputs")
    p.add_argument("out_dir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompt", type=int, default=40)
    p.add_argument("--gen", type=int, default=60)
    p = sub.add_parser("check")
    p.add_argument("ckpt_dir")
    p.add_argument("in_dir")
    p.add_argument("--steps", required=True)
    p.add_argument("--mel", required=True)
    p.add_argument("--dump-dir")
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--valid", type=int, help="length mask: frames from VALID on are padding")
    a = ap.parse_args()
    return cmd_inputs(a) or 0 if a.cmd == "inputs" else cmd_check(a)


if __name__ == "__main__":
    sys.exit(main())
