#!/usr/bin/python3
"""PyTorch reference of the HiFT vocoder (upstream models/s3gen/hifigan.py HiFTGenerator.inference
and f0_predictor.py, spec §9-10) built from torch primitives on the upstream-format
s3gen_meanflow.safetensors (mel2wav.*, weight norm as parametrizations original0/original1,
fused here with torch._weight_norm exactly as the parametrization does), for
tests/test_hift_parity.sh.

  hift_reference.py inputs OUT_DIR --seed N --frames T
      mel.npy [80, T] (a smooth random log-mel), phases.npy [9] ~ U(-pi, pi) and
      noise.npy [9, 480 T] ~ N(0, 1): the random draws of upstream SineGen, drawn here once
      and given to both implementations (C++: debug hift --phases/--noise)
  hift_reference.py scale CKPT_DIR NAME=FACTOR ...
      multiplies s3gen_meanflow.safetensors tensors in place (see the test script)
  hift_reference.py check CKPT_DIR IN_DIR --wave W.npy [--wave-trim W2.npy] --dump-dir D
                    [--rtol R] [--expect-voiced lo,hi]
      runs the reference with the shared draws and compares the C++ intermediates and wave

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
S3GEN = "s3gen_meanflow.safetensors"

# HiFTGenerator arguments of s3gen.py (Turbo / Multilingual alike)
SR = 24000
NB_HARMONICS = 8
NSF_ALPHA, NSF_SIGMA, VOICED_THRESHOLD = 0.1, 0.003, 10
UPSAMPLE_RATES = [8, 5, 3]
UPSAMPLE_KERNELS = [16, 11, 7]
N_FFT, HOP = 16, 4
RES_KERNELS, RES_DILATIONS = [3, 7, 11], [[1, 3, 5]] * 3
SRC_KERNELS, SRC_DILATIONS = [7, 7, 11], [[1, 3, 5]] * 3
LRELU_SLOPE, AUDIO_LIMIT = 0.1, 0.99
SPF = int(np.prod(UPSAMPLE_RATES)) * HOP  # 480 samples per mel frame


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    return header, 8 + n


def load_mel2wav(path):
    header, base = read_header(path)
    with open(path, "rb") as f:
        raw = f.read()
    out = {}
    for name, info in header.items():
        if not name.startswith("mel2wav."):
            continue
        b, e = info["data_offsets"]
        t = torch.frombuffer(bytearray(raw[base + b:base + e]), dtype=DTYPES[info["dtype"]])
        out[name[len("mel2wav."):]] = t.reshape(info["shape"]).float()
    return out


class Hift:
    def __init__(self, ckpt_dir):
        self.w = load_mel2wav(os.path.join(ckpt_dir, S3GEN))

    def conv_w(self, p):
        """Weight of a (possibly weight-normed) conv: torch._weight_norm(v, g, 0), as
        torch.nn.utils.parametrizations.weight_norm computes it at every forward."""
        w = self.w
        if p + ".parametrizations.weight.original0" in w:
            return torch._weight_norm(w[p + ".parametrizations.weight.original1"],
                                      w[p + ".parametrizations.weight.original0"], 0)
        return w[p + ".weight"]

    def conv1d(self, x, p, **kw):
        return F.conv1d(x, self.conv_w(p), self.w[p + ".bias"], **kw)

    @staticmethod
    def snake(x, alpha):
        a = alpha.unsqueeze(0).unsqueeze(-1)
        return x + (1.0 / (a + 0.000000001)) * torch.pow(torch.sin(x * a), 2)

    def resblock(self, x, p, k, dils):
        for j, d in enumerate(dils):
            xt = self.snake(x, self.w[f"{p}.activations1.{j}.alpha"])
            xt = self.conv1d(xt, f"{p}.convs1.{j}", dilation=d, padding=(k * d - d) // 2)
            xt = self.snake(xt, self.w[f"{p}.activations2.{j}.alpha"])
            xt = self.conv1d(xt, f"{p}.convs2.{j}", padding=(k - 1) // 2)
            x = xt + x
        return x

    def f0(self, mel):
        """mel [1, 80, T] -> f0 [1, T] (ConvRNNF0Predictor)."""
        x = mel
        for l in range(5):
            x = F.elu(self.conv1d(x, f"f0_predictor.condnet.{2 * l}", padding=1))
        x = x.transpose(1, 2)
        y = F.linear(x, self.w["f0_predictor.classifier.weight"], self.w["f0_predictor.classifier.bias"])
        return torch.abs(y.squeeze(-1))

    def source(self, f0, phases, noise):
        """SineGen + SourceModuleHnNSF with the random draws given: f0 [1, T] -> s [1, 1, 480 T]."""
        up = F.interpolate(f0[:, None], scale_factor=float(SPF), mode="nearest")  # nn.Upsample
        f0s = up  # [1, 1, L] (SourceModuleHnNSF transposes twice)
        H1 = NB_HARMONICS + 1
        F_mat = torch.zeros((1, H1, f0s.size(-1)))
        for i in range(H1):
            F_mat[:, i:i + 1, :] = f0s * (i + 1) / SR
        theta = 2 * np.pi * (torch.cumsum(F_mat, dim=-1) % 1)
        phase_vec = phases.reshape(1, H1, 1).clone()  # Uniform(-pi, pi).sample((1, H1, 1))
        phase_vec[:, 0, :] = 0
        sine = NSF_ALPHA * torch.sin(theta + phase_vec)
        uv = (f0s > VOICED_THRESHOLD).type(torch.float32)
        noise_amp = uv * NSF_SIGMA + (1 - uv) * NSF_ALPHA / 3
        e = sine * uv + noise_amp * noise[None]  # noise_amp * torch.randn_like(sine_waves)
        s = torch.tanh(F.linear(e.transpose(1, 2), self.w["m_source.l_linear.weight"],
                                self.w["m_source.l_linear.bias"]))
        return s.transpose(1, 2), uv

    def decode(self, mel, s, cap):
        win = torch.from_numpy((0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)).astype(np.float32))
        spec = torch.view_as_real(torch.stft(s.squeeze(1), N_FFT, HOP, N_FFT, window=win, return_complex=True))
        s_stft = torch.cat([spec[..., 0], spec[..., 1]], dim=1)
        cap["s_stft"] = s_stft[0]
        x = self.conv1d(mel, "conv_pre", padding=3)
        cap["conv_pre"] = x[0]
        nk = len(RES_KERNELS)
        for i, (u, k) in enumerate(zip(UPSAMPLE_RATES, UPSAMPLE_KERNELS)):
            x = F.leaky_relu(x, LRELU_SLOPE)
            x = F.conv_transpose1d(x, self.conv_w(f"ups.{i}"), self.w[f"ups.{i}.bias"], stride=u,
                                   padding=(k - u) // 2)
            if i == len(UPSAMPLE_RATES) - 1:
                x = F.pad(x, (1, 0), mode="reflect")  # nn.ReflectionPad1d((1, 0))
            cap[f"ups.{i}"] = x[0]
            d = int(np.prod(UPSAMPLE_RATES[i + 1:]))
            p = f"source_downs.{i}"
            if d == 1:
                si = self.conv1d(s_stft, p)
            else:
                si = self.conv1d(s_stft, p, stride=d, padding=d // 2)
            si = self.resblock(si, f"source_resblocks.{i}", SRC_KERNELS[i], SRC_DILATIONS[i])
            cap[f"source_branch.{i}"] = si[0]
            x = x + si
            xs = None
            for j in range(nk):
                r = self.resblock(x, f"resblocks.{i * nk + j}", RES_KERNELS[j], RES_DILATIONS[j])
                xs = r if xs is None else xs + r
            x = xs / nk
            cap[f"stage.{i}"] = x[0]
        x = F.leaky_relu(x)
        x = self.conv1d(x, "conv_post", padding=3)
        cap["conv_post"] = x[0]
        mag = torch.clip(torch.exp(x[:, :N_FFT // 2 + 1, :]), max=1e2)
        phase = torch.sin(x[:, N_FFT // 2 + 1:, :])
        wav = torch.istft(torch.complex(mag * torch.cos(phase), mag * torch.sin(phase)), N_FFT, HOP, N_FFT,
                          window=win)
        return torch.clamp(wav, -AUDIO_LIMIT, AUDIO_LIMIT)

    @torch.no_grad()
    def forward(self, mel, phases, noise, f0_override=None):
        cap = {}
        mel = mel[None]
        f0 = self.f0(mel)
        cap["f0"] = f0[0].clone()
        if f0_override is not None:
            f0 = f0_override[None].clone()
        s, uv = self.source(f0, phases, noise)
        cap["source"] = s[0, 0]
        wav = self.decode(mel, s, cap)
        cap["wave"] = wav[0]
        return wav[0], cap


def trim_fade(wav):
    """s3gen.py: the first 480 samples zeroed, the next 480 faded in."""
    n_trim = SR // 50
    tf = torch.zeros(2 * n_trim)
    tf[n_trim:] = (torch.cos(torch.linspace(torch.pi, 0, n_trim)) + 1) / 2
    out = wav.clone()
    out[:len(tf)] *= tf[:len(out)]
    return out


def cmd_inputs(a):
    os.makedirs(a.out_dir, exist_ok=True)
    g = torch.Generator().manual_seed(a.seed)
    T = a.frames
    # A smooth log-mel in the range of real 24 kHz speech mels (about -11 .. 1).
    raw = torch.randn(80, T + 4, generator=g)
    mel = -5.0 + 2.0 * (raw[:, :-4] + raw[:, 1:-3] + raw[:, 2:-2] + raw[:, 3:-1] + raw[:, 4:]) / math.sqrt(5)
    mel = mel + torch.linspace(1.5, -3.0, 80)[:, None]
    mel = mel.clamp(-11.5, 2.0)
    # SineGen's draws, in upstream order: U(-pi, pi) phases, then randn_like noise.
    phases = (torch.rand(NB_HARMONICS + 1, generator=g) * 2 - 1) * np.pi
    noise = torch.randn(NB_HARMONICS + 1, SPF * T, generator=g)
    np.save(os.path.join(a.out_dir, "mel.npy"), mel.float().numpy())
    np.save(os.path.join(a.out_dir, "phases.npy"), phases.float().numpy())
    np.save(os.path.join(a.out_dir, "noise.npy"), noise.float().numpy())


def cmd_scale(a):
    path = os.path.join(a.ckpt_dir, S3GEN)
    header, base = read_header(path)
    for spec in a.tensor:
        name, s = spec.rsplit("=", 1)
        info = header[name]
        assert info["dtype"] == "F32", name
        b, e = info["data_offsets"]
        with open(path, "r+b") as f:
            f.seek(base + b)
            w = np.frombuffer(f.read(e - b), dtype="<f4").copy()
            f.seek(base + b)
            f.write((w * np.float32(float(s))).astype("<f4").tobytes())


def rel_l2(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)), float(np.max(np.abs(got - ref)))


def cmd_check(a):
    mel = torch.from_numpy(np.load(os.path.join(a.in_dir, "mel.npy")))
    phases = torch.from_numpy(np.load(os.path.join(a.in_dir, "phases.npy")))
    noise = torch.from_numpy(np.load(os.path.join(a.in_dir, "noise.npy")))
    model = Hift(a.ckpt_dir)
    f0_cpp = None
    if a.use_cpp_f0:
        f0_cpp = torch.from_numpy(np.load(os.path.join(a.dump_dir, "f0.npy")))
    wav, cap = model.forward(mel, phases, noise, f0_cpp)
    f0 = cap["f0"]  # the reference's own
    ok = True
    if f0_cpp is not None:
        r, _ = rel_l2(f0_cpp.numpy(), f0.numpy())
        print(f"  source and decoder fed with the C++ f0 (rel L2 {r:.2e} to the reference f0, tolerance 1e-5)")
        if not r <= 1e-5:
            print("FAIL: f0 differs from the reference")
            ok = False

    voiced = float((f0 > VOICED_THRESHOLD).float().mean())
    near = float((f0 - VOICED_THRESHOLD).abs().min())
    print(f"  f0: {float(f0.min()):.2f} .. {float(f0.max()):.2f} Hz, voiced frames {voiced:.0%}, "
          f"closest to the {VOICED_THRESHOLD} Hz threshold: {near:.3g} Hz")
    if a.expect_voiced:
        lo, hi = (float(v) for v in a.expect_voiced.split(","))
        if not lo <= voiced <= hi:
            print(f"FAIL: voiced fraction {voiced:.2f} outside [{lo}, {hi}]: the test no longer covers both branches")
            ok = False
    if near < 1e-3:
        print("FAIL: an f0 value lies within 1e-3 Hz of the voicing threshold; pick another seed")
        ok = False

    # Intermediates: reported with their own error; the waveform carries the tolerance.
    names = ["f0", "source", "s_stft", "conv_pre"]
    for i in range(len(UPSAMPLE_RATES)):
        names += [f"ups.{i}", f"source_branch.{i}", f"stage.{i}"]
    names += ["conv_post", "wave"]
    for n in names:
        p = os.path.join(a.dump_dir, n + ".npy")
        if not os.path.exists(p):
            print(f"FAIL: missing C++ dump {p}")
            ok = False
            continue
        got = np.load(p)
        ref = cap[n].numpy()
        if got.shape != ref.shape:
            print(f"FAIL: {n}: C++ shape {got.shape}, reference {ref.shape}")
            ok = False
            continue
        r, m = rel_l2(got, ref)
        print(f"  {n:18s} {str(ref.shape):16s} rel L2 {r:.2e}  max|diff| {m:.2e}")

    got = np.load(a.wave)
    r, m = rel_l2(got, wav.numpy())
    clamped = float((wav.abs() >= AUDIO_LIMIT).float().mean())
    print(f"  wave: rel L2 {r:.3e} (tolerance {a.rtol:g}), max|diff| {m:.3e}, rms {float(wav.pow(2).mean().sqrt()):.4f}, "
          f"clamped {clamped:.0%}")
    if got.shape != tuple(wav.shape) or not r <= a.rtol:
        print("FAIL: waveform differs from the reference")
        ok = False
    if a.wave_trim:
        got_t = np.load(a.wave_trim)
        ref_t = trim_fade(wav).numpy()
        r2, m2 = rel_l2(got_t, ref_t)
        print(f"  wave with trim/fade: rel L2 {r2:.3e}, max|diff| {m2:.3e}")
        if got_t.shape != ref_t.shape or not r2 <= a.rtol or np.any(got_t[:SR // 50] != 0):
            print("FAIL: trim/fade differs from the reference")
            ok = False
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("inputs")
    p.add_argument("out_dir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--frames", type=int, default=24)
    p = sub.add_parser("scale")
    p.add_argument("ckpt_dir")
    p.add_argument("tensor", nargs="+", help="NAME=FACTOR")
    p = sub.add_parser("check")
    p.add_argument("ckpt_dir")
    p.add_argument("in_dir")
    p.add_argument("--wave", required=True)
    p.add_argument("--wave-trim")
    p.add_argument("--dump-dir", required=True)
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--expect-voiced")
    p.add_argument("--use-cpp-f0", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(2)
    if a.cmd == "inputs":
        return cmd_inputs(a) or 0
    if a.cmd == "scale":
        return cmd_scale(a) or 0
    return cmd_check(a)


if __name__ == "__main__":
    sys.exit(main())
