#!/usr/bin/python3
"""PyTorch reference of S3Gen's CAMPPlus x-vector (models/s3gen/xvector.py: extract_feature +
CAMPPlus.forward, as S3Gen.embed_ref calls speaker_encoder.inference on ref_wav_16), written
from the spec (§11.2) with torch.nn Conv2d / Conv1d / BatchNorm (eval, running statistics) on
the upstream-format S3Gen checkpoint (s3gen_meanflow.safetensors, or s3gen.pt for
Multilingual), for tests/test_campplus_parity.sh.

torchaudio is not packaged here, so kaldi.fbank(wave, num_mel_bins=80) is written out from its
documented definition (25/10 ms frames, snip_edges, DC removal, pre-emphasis 0.97, Povey window,
FFT 512, power, 80 Kaldi mel bins 20-8000 Hz, log floored at float32 eps); where torchaudio is
importable it is used instead. Sizes (channels, growth, layers per block) are read from the
checkpoint; kernel 3 and dilations 1/2/2 are upstream's constants.

  campplus_reference.py compare CKPT_DIR (--wav WAV.npy | --fbank FB.npy) --ours EMB.npy
                        [--dump-dir DIR] [--rtol R]
      runs the reference and compares our x-vector (and, with --dump-dir, every intermediate
      our `debug campplus --dump-dir` wrote there: fbank, head, tdnn, block1..3,
      transit1..3, stats)

Relative error = max|ours - ref| / max|ref|. Exit 0 on success, 1 on a mismatch.
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
from torch import nn

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}
PREFIX = "speaker_encoder."
KERNELS, DILATIONS = (3, 3, 3), (1, 2, 2)


def load_state(ckpt_dir):
    st = os.path.join(ckpt_dir, "s3gen_meanflow.safetensors")
    if not os.path.exists(st):
        st = os.path.join(ckpt_dir, "s3gen.safetensors")
    out = {}
    if os.path.exists(st):
        with open(st, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n).decode("utf-8"))
            base = 8 + n
            for name, info in header.items():
                if not name.startswith(PREFIX):
                    continue
                b, e = info["data_offsets"]
                f.seek(base + b)
                dt = DTYPES[info["dtype"]]
                t = torch.frombuffer(bytearray(f.read(e - b)), dtype=dt) if e > b else torch.empty(0, dtype=dt)
                t = t.reshape(info["shape"])
                out[name[len(PREFIX):]] = t.float() if dt in (torch.float16, torch.bfloat16) else t
        return out
    sd = torch.load(os.path.join(ckpt_dir, "s3gen.pt"), map_location="cpu")
    return {k[len(PREFIX):]: v for k, v in sd.items() if k.startswith(PREFIX)}


def bn_relu(c, affine=True):
    return nn.Sequential(nn.BatchNorm1d(c, affine=affine), nn.ReLU())


class ResBlock(nn.Module):
    def __init__(self, m, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(m, m, 3, stride=(stride, 1), padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(m)
        self.conv2 = nn.Conv2d(m, m, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(m)
        self.shortcut = nn.Sequential()
        if stride != 1:
            self.shortcut = nn.Sequential(nn.Conv2d(m, m, 1, stride=(stride, 1), bias=False), nn.BatchNorm2d(m))

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + self.shortcut(x))


class Head(nn.Module):  # FCM
    def __init__(self, m, n_blocks):
        super().__init__()
        self.conv1 = nn.Conv2d(1, m, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(m)
        self.layer1 = nn.Sequential(*[ResBlock(m, 2 if j == 0 else 1) for j in range(n_blocks)])
        self.layer2 = nn.Sequential(*[ResBlock(m, 2 if j == 0 else 1) for j in range(n_blocks)])
        self.conv2 = nn.Conv2d(m, m, 3, stride=(2, 1), padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(m)

    def forward(self, x):  # [B, F, T] -> [B, m F/8, T]
        y = F.relu(self.bn1(self.conv1(x.unsqueeze(1))))
        y = self.layer2(self.layer1(y))
        y = F.relu(self.bn2(self.conv2(y)))
        return y.reshape(y.shape[0], y.shape[1] * y.shape[2], y.shape[3])


class Nonlinear(nn.Module):  # get_nonlinear("batchnorm-relu") keeps the key ".batchnorm"
    def __init__(self, c, relu=True, affine=True):
        super().__init__()
        self.batchnorm = nn.BatchNorm1d(c, affine=affine)
        self.relu = relu

    def forward(self, x):
        x = self.batchnorm(x)
        return F.relu(x) if self.relu else x


class CAMLayer(nn.Module):
    def __init__(self, bn, out, k, d, seg_len=100):
        super().__init__()
        self.linear_local = nn.Conv1d(bn, out, k, padding=(k - 1) // 2 * d, dilation=d, bias=False)
        self.linear1 = nn.Conv1d(bn, bn // 2, 1)
        self.linear2 = nn.Conv1d(bn // 2, out, 1)
        self.seg_len = seg_len

    def forward(self, x):
        y = self.linear_local(x)
        seg = F.avg_pool1d(x, kernel_size=self.seg_len, stride=self.seg_len, ceil_mode=True)
        seg = seg.unsqueeze(-1).expand(*seg.shape, self.seg_len).reshape(*seg.shape[:-1], -1)[..., :x.shape[-1]]
        ctx = x.mean(-1, keepdim=True) + seg
        m = torch.sigmoid(self.linear2(F.relu(self.linear1(ctx))))
        return y * m


class DenseTDNNLayer(nn.Module):
    def __init__(self, cin, out, bn, k, d):
        super().__init__()
        self.nonlinear1 = Nonlinear(cin)
        self.linear1 = nn.Conv1d(cin, bn, 1, bias=False)
        self.nonlinear2 = Nonlinear(bn)
        self.cam_layer = CAMLayer(bn, out, k, d)

    def forward(self, x):
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))))


class Block(nn.ModuleDict):
    def __init__(self, n, cin, out, bn, k, d):
        super().__init__({f"tdnnd{i + 1}": DenseTDNNLayer(cin + i * out, out, bn, k, d) for i in range(n)})

    def forward(self, x):
        for layer in self.values():
            x = torch.cat([x, layer(x)], dim=1)
        return x


class Transit(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.nonlinear = Nonlinear(cin)
        self.linear = nn.Conv1d(cin, cout, 1, bias=False)

    def forward(self, x):
        return self.linear(self.nonlinear(x))


class TDNN(nn.Module):
    def __init__(self, cin, cout, k):
        super().__init__()
        self.linear = nn.Conv1d(cin, cout, k, stride=2, padding=(k - 1) // 2, bias=False)
        self.nonlinear = Nonlinear(cout)

    def forward(self, x):
        return self.nonlinear(self.linear(x))


class Dense(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.linear = nn.Conv1d(cin, cout, 1, bias=False)
        self.nonlinear = Nonlinear(cout, relu=False, affine=False)

    def forward(self, x):  # [B, C] -> [B, E]
        return self.nonlinear(self.linear(x.unsqueeze(-1)).squeeze(-1))


class CAMPPlus(nn.Module):
    def __init__(self, sd):
        super().__init__()
        m = sd["head.conv1.weight"].shape[0]
        n_blocks = len({k.split(".")[2] for k in sd if k.startswith("head.layer1.")})
        init = sd["xvector.tdnn.linear.weight"].shape[0]
        growth = sd["xvector.block1.tdnnd1.cam_layer.linear_local.weight"].shape[0]
        bn = sd["xvector.block1.tdnnd1.linear1.weight"].shape[0]
        embed = sd["xvector.dense.linear.weight"].shape[0]
        self.head = Head(m, n_blocks)
        x = nn.Module()
        x.tdnn = TDNN(sd["xvector.tdnn.linear.weight"].shape[1], init, sd["xvector.tdnn.linear.weight"].shape[2])
        ch = init
        for b in range(3):
            n = len({k.split(".")[2] for k in sd if k.startswith(f"xvector.block{b + 1}.")})
            setattr(x, f"block{b + 1}", Block(n, ch, growth, bn, KERNELS[b], DILATIONS[b]))
            ch += n * growth
            setattr(x, f"transit{b + 1}", Transit(ch, ch // 2))
            ch //= 2
        x.out_nonlinear = Nonlinear(ch)
        x.dense = Dense(2 * ch, embed)
        self.xvector = x
        self.load_state_dict(sd, strict=True)
        self.eval()

    def forward(self, feats, dump):  # feats [T, F] -> [E]
        y = self.head(feats.T.unsqueeze(0))
        dump["head"] = y[0]
        x = self.xvector
        y = x.tdnn(y)
        dump["tdnn"] = y[0]
        for b in range(3):
            y = getattr(x, f"block{b + 1}")(y)
            dump[f"block{b + 1}"] = y[0]
            y = getattr(x, f"transit{b + 1}")(y)
            dump[f"transit{b + 1}"] = y[0]
        y = x.out_nonlinear(y)
        stats = torch.cat([y.mean(dim=-1), y.std(dim=-1, unbiased=True)], dim=-1)  # statistics_pooling
        dump["stats"] = stats[0]
        return x.dense(stats)[0]


def kaldi_fbank(wav):
    try:
        import torchaudio.compliance.kaldi as K
        return K.fbank(torch.from_numpy(wav)[None], num_mel_bins=80)
    except ImportError:
        pass
    w = torch.from_numpy(wav)
    win, hop, nfft = 400, 160, 512
    m = 1 + (w.numel() - win) // hop
    frames = w.as_strided((m, win), (hop, 1))
    frames = frames - frames.mean(dim=1, keepdim=True)
    prev = F.pad(frames.unsqueeze(0), (1, 0), mode="replicate").squeeze(0)[:, :-1]
    frames = (frames - 0.97 * prev) * torch.hann_window(win, periodic=False).pow(0.85)
    power = torch.fft.rfft(F.pad(frames, (0, nfft - win))).abs().pow(2)
    mel = lambda f: 1127.0 * math.log(1.0 + f / 700.0)
    lo, hi = mel(20.0), mel(8000.0)
    d = (hi - lo) / 81
    b = torch.arange(80, dtype=torch.float32).unsqueeze(1)
    left, center, right = lo + b * d, lo + (b + 1.0) * d, lo + (b + 2.0) * d
    fm = 1127.0 * (1.0 + (16000 / nfft) * torch.arange(nfft // 2, dtype=torch.float32) / 700.0).log()
    banks = torch.clamp(torch.min((fm - left) / (center - left), (right - fm) / (right - center)), min=0.0)
    banks = F.pad(banks, (0, 1))
    return torch.clamp(power @ banks.T, min=torch.finfo(torch.float32).eps).log()


def rel_err(ours, ref):
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    if ours.shape != ref.shape:
        return float("inf")
    return float(np.max(np.abs(ours - ref)) / max(np.max(np.abs(ref)), 1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["compare"])
    ap.add_argument("ckpt")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--wav")
    g.add_argument("--fbank")
    ap.add_argument("--ours", required=True)
    ap.add_argument("--dump-dir")
    ap.add_argument("--rtol", type=float, default=1e-4)
    a = ap.parse_args()
    torch.set_num_threads(1)
    model = CAMPPlus(load_state(a.ckpt))
    dump = {}
    with torch.inference_mode():
        if a.wav:
            feats = kaldi_fbank(np.load(a.wav).astype(np.float32).reshape(-1))
            feats = feats - feats.mean(dim=0, keepdim=True)  # extract_feature's mean normalisation
            dump["fbank"] = feats
        else:
            feats = torch.from_numpy(np.load(a.fbank).astype(np.float32)).reshape(-1, 80)
        ref = model(feats, dump).numpy()
    ok = True
    checks = [("embedding", np.load(a.ours), ref)]
    if a.dump_dir:
        checks += [(k, np.load(os.path.join(a.dump_dir, k + ".npy")), v.numpy()) for k, v in dump.items()]
    for name, ours, r in checks:
        e = rel_err(ours, r)
        good = e <= a.rtol
        ok = ok and good
        print(f"{'ok  ' if good else 'FAIL'} {name:10s} shape {str(np.shape(ours)):12s} ref {str(np.shape(r)):12s} "
              f"rel {e:.2e} (tol {a.rtol:g})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
