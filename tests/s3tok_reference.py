#!/usr/bin/python3
"""PyTorch reference of chatterbox's S3Tokenizer.forward([wav], max_len) for tests/test_s3tok_parity.sh:
the log-mel of models/s3tokenizer/s3tokenizer.py (from the checkpoint's `_mel_filters` and `window`
buffers) and S3TokenizerV2 of the external s3tokenizer package (model_v2.py AudioEncoderV2 with FSMN
attention blocks and RoPE, FSQCodebook.encode), written from torch primitives in upstream's order of
operations (f32, eager, non-SDPA attention, masks included) on the upstream-format S3Gen
safetensors file or Multilingual's s3gen.pt (`tokenizer.*` tensors).

  s3tok_reference.py signal OUT.npy --seconds S [--samples N] [--kind speech|synth] [--seed N]
      a 16 kHz float32 test wave: espeak-ng speech (22.05 kHz, Fourier-resampled to 16 kHz) when
      --kind speech and espeak-ng runs, otherwise a synthetic voiced signal (harmonics with a
      gliding f0, formant-like amplitude modulation, noise bursts); printed: which one it is
  s3tok_reference.py compare CKPT_DIR WAV.npy --tokens T.npy [--proj P.npy] [--dump-dir DIR]
                             [--max-tokens N] [--rtol R] [--f16-weights]
      runs the reference and compares: tokens exactly, the FSQ projection (and with --dump-dir the
      named intermediates the C++ side dumped) within rel. R = max|cpp - ref| / max|ref|; prints
      how many FSQ inputs lie near a rounding boundary (|tanh(h) * 0.999| near 0.5); --f16-weights
      rounds the Linear weights to f16 first, as an f16/q8_0/q4_0 GGUF stores them (quant_policy)

Exit 0 on success, 1 on a mismatch.
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import wave

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
PREFIX = "tokenizer."
S3_FILES = ("s3gen_meanflow.safetensors", "s3gen.safetensors")


def round_linear_weights_f16(sd):
    """What `chatterbox convert --type f16|q8_0|q4_0` stores for s3tok.*: 2-D weights with both dims
    >= 128 and the inner dim a multiple of 32 become f16 (convert/quant_policy.cpp); the rest stays f32."""
    for k, t in sd.items():
        if t.dim() == 2 and k.endswith(".weight") and min(t.shape) >= 128 and t.shape[1] % 32 == 0:
            sd[k] = t.half().float()


def load_tokenizer_state(ckpt_dir):
    """tokenizer.* tensors of the S3Gen safetensors file, as float32, keys without the prefix."""
    path = next((os.path.join(ckpt_dir, f) for f in S3_FILES if os.path.exists(os.path.join(ckpt_dir, f))), None)
    if path is None:
        pt = os.path.join(ckpt_dir, "s3gen.pt")  # Multilingual: a torch state dict
        if not os.path.exists(pt):
            raise SystemExit(f"no {', '.join(S3_FILES)} or s3gen.pt in {ckpt_dir}")
        state = torch.load(pt, map_location="cpu")
        return {k[len(PREFIX):]: v.float() for k, v in state.items() if k.startswith(PREFIX)}
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__" or not name.startswith(PREFIX):
                continue
            b, e = info["data_offsets"]
            f.seek(base + b)
            t = torch.frombuffer(bytearray(f.read(e - b)), dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
            out[name[len(PREFIX):]] = t.float()
    return out


# ---------------- front-end (s3tokenizer.py log_mel_spectrogram) ----------------
def log_mel(sd, audio):
    """audio [L] -> [128, L // 160]"""
    stft = torch.stft(audio, 400, 160, window=sd["window"], return_complex=True)
    magnitudes = stft[..., :-1].abs() ** 2
    mel_spec = sd["_mel_filters"] @ magnitudes
    log_spec = torch.clamp(mel_spec, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


# ---------------- S3TokenizerV2 (model_v2.py) ----------------
def non_pad_mask(lengths, max_len):
    return torch.arange(max_len).unsqueeze(0) < lengths.unsqueeze(1)  # [B, T] bool


def rope_tables(T, dim=64, end=2048, theta=10000.0):
    """precompute_freqs_cis(64, 2048) then the cos/sin halves apply_rotary_emb reads: [T, 64] each."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    t = torch.arange(end)
    ang = torch.outer(t, freqs).float()
    cis = torch.polar(torch.ones_like(ang), ang)
    cis = torch.cat((cis, cis), dim=-1)[:T]
    real = torch.view_as_real(cis)
    return real[:, :, 0], real[:, :, 1]


def rotate(x, cos, sin):
    """x [B, T, H, D]: x * cos + cat(-x_r, x_l) * sin"""
    D = x.shape[-1]
    xl, xr = x[..., : D // 2], x[..., D // 2:]
    xrot = torch.cat((-xr, xl), dim=-1)
    return x * cos[None, :, None, :] + xrot * sin[None, :, None, :]


def block(sd, p, x, bias_mask, pad_mask, cos, sin, n_head):
    """ResidualAttentionBlock: x [B, T, C]; bias_mask [B, 1, 1, T]; pad_mask [B, T, 1]"""
    C = x.shape[-1]
    h = F.layer_norm(x, (C,), sd[p + "attn_ln.weight"], sd[p + "attn_ln.bias"], 1e-6)
    q = F.linear(h, sd[p + "attn.query.weight"], sd[p + "attn.query.bias"])
    k = F.linear(h, sd[p + "attn.key.weight"])
    v = F.linear(h, sd[p + "attn.value.weight"], sd[p + "attn.value.bias"])
    B, T, _ = q.shape
    scale = (C // n_head) ** -0.25
    q = q.view(B, T, n_head, -1)
    k = k.view(B, T, n_head, -1)
    v = v.view(B, T, n_head, -1)
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    # FSMN memory on v before the head split
    vin = v.reshape(B, T, -1) * pad_mask
    K = sd[p + "attn.fsmn_block.weight"].shape[-1]
    left = (K - 1) // 2
    m = F.conv1d(F.pad(vin.transpose(1, 2), (left, K - 1 - left)), sd[p + "attn.fsmn_block.weight"], groups=C)
    m = m.transpose(1, 2)
    m += vin
    m = m * pad_mask
    q = q.permute(0, 2, 1, 3) * scale
    kt = k.permute(0, 2, 3, 1) * scale
    qk = (q @ kt) + bias_mask
    w = torch.softmax(qk.float(), dim=-1)
    wv = (w @ v.permute(0, 2, 1, 3)).permute(0, 2, 1, 3).flatten(start_dim=2)
    x = x + (F.linear(wv, sd[p + "attn.out.weight"], sd[p + "attn.out.bias"]) + m)
    h = F.layer_norm(x, (C,), sd[p + "mlp_ln.weight"], sd[p + "mlp_ln.bias"], 1e-5)
    h = F.linear(F.gelu(F.linear(h, sd[p + "mlp.0.weight"], sd[p + "mlp.0.bias"])), sd[p + "mlp.2.weight"],
                 sd[p + "mlp.2.bias"])
    return x + h


def encode(sd, mel, dumps):
    """mel [128, T100] (a batch of one) -> hidden [1, T, C]"""
    x = mel.unsqueeze(0)
    x_len = torch.tensor([mel.shape[-1]])
    C = sd["encoder.conv1.weight"].shape[0]
    n_head = C // 64
    n_layer = len({k.split(".")[2] for k in sd if k.startswith("encoder.blocks.")})
    T = x.shape[-1]
    mask = non_pad_mask(x_len, T).unsqueeze(1)
    x = F.gelu(F.conv1d(x * mask, sd["encoder.conv1.weight"], sd["encoder.conv1.bias"], stride=2, padding=1))
    dumps["s3tok.conv1"] = x[0]
    x_len = (x_len + 2 - 2 - 1) // 2 + 1
    x_slen = (T + 2 - 2 - 1) // 2 + 1
    mask = non_pad_mask(x_len, x_slen).unsqueeze(1)
    x = F.gelu(F.conv1d(x * mask, sd["encoder.conv2.weight"], sd["encoder.conv2.bias"], stride=2, padding=1))
    x_len = (x_len + 2 - 2 - 1) // 2 + 1
    x_slen = (x_slen + 2 - 2 - 1) // 2 + 1
    mask = non_pad_mask(x_len, x_slen).unsqueeze(1)  # [B, 1, T]
    x = x.permute(0, 2, 1)
    dumps["s3tok.conv2"] = x[0]
    pad_mask = mask.transpose(1, 2).float()
    bias_mask = ((1.0 - mask.float()) * -1.0e10).unsqueeze(1)
    cos, sin = rope_tables(x.shape[1])
    for i in range(n_layer):
        x = block(sd, f"encoder.blocks.{i}.", x, bias_mask, pad_mask, cos, sin, n_head)
        dumps[f"s3tok.block{i}.out"] = x[0]
    return x


def fsq(sd, hidden):
    """FSQCodebook.encode: hidden [1, T, C] -> (tokens [T] int, h [T, 8] before tanh)"""
    h = F.linear(hidden.reshape(-1, hidden.shape[-1]), sd["quantizer._codebook.project_down.weight"],
                 sd["quantizer._codebook.project_down.bias"]).float()
    u = h.tanh() * 0.9990000128746033
    d = u.round() + 1
    powers = torch.pow(3, torch.arange(2 ** 3, dtype=d.dtype))
    return torch.sum(d * powers.unsqueeze(0), dim=-1).int(), h


def reference(sd, wav, max_tokens):
    with torch.inference_mode():
        mel = log_mel(sd, torch.from_numpy(wav))
        if max_tokens is not None:
            mel = mel[..., : max_tokens * 4]
        dumps = {"s3tok.mel": mel}
        hidden = encode(sd, mel, dumps)
        tokens, h = fsq(sd, hidden)
        dumps["s3tok.project_down"] = h
    return tokens.numpy(), h, dumps


# ---------------- test signal ----------------
def fourier_resample(x, n_out):
    X = np.fft.rfft(x.astype(np.float64))
    k = n_out // 2 + 1
    Y = np.zeros(k, dtype=np.complex128)
    m = min(k, X.shape[0])
    Y[:m] = X[:m]
    return (np.fft.irfft(Y, n_out) * (n_out / x.shape[0])).astype(np.float32)


def espeak_wave(seconds):
    exe = shutil.which("espeak-ng")
    if exe is None:
        return None
    text = ("The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single "
            "step, and every voice we clone starts with a few seconds of clear speech.")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.wav")
        try:
            subprocess.run([exe, "-s", "150", "-w", path, text], check=True, capture_output=True, timeout=60)
            with wave.open(path, "rb") as w:
                sr, n, width, ch = w.getframerate(), w.getnframes(), w.getsampwidth(), w.getnchannels()
                raw = w.readframes(n)
        except (OSError, subprocess.SubprocessError, wave.Error):
            return None
    if width != 2 or n == 0:
        return None
    x = np.frombuffer(raw, dtype="<i2").astype(np.float32).reshape(-1, ch).mean(axis=1) / 32768.0
    y = fourier_resample(x, int(round(x.shape[0] * 16000 / sr)))
    want = int(seconds * 16000)
    reps = -(-want // y.shape[0])
    return np.tile(y, reps)[:want] * 0.9 / max(1e-6, float(np.abs(y).max()))


def synth_wave(seconds, seed):
    rng = np.random.default_rng(seed)
    n = int(seconds * 16000)
    t = np.arange(n) / 16000.0
    f0 = 120 + 40 * np.sin(2 * np.pi * 0.7 * t) + 20 * np.sin(2 * np.pi * 2.3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / 16000.0
    x = sum((0.6 / k) * np.sin(k * phase) * (1 + 0.5 * np.sin(2 * np.pi * (3 + k) * t)) for k in range(1, 20))
    x *= 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2  # syllable-like envelope
    bursts = (np.sin(2 * np.pi * 1.3 * t) > 0.8).astype(np.float64)
    x += 0.2 * bursts * rng.standard_normal(n)
    return (0.5 * x / np.abs(x).max()).astype(np.float32)


# ---------------- compare ----------------
def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)) if b.size else 0.0


def boundary_report(h_ref, h_cpp):
    """FSQ digits flip where |tanh(h) * 0.999| crosses 0.5: report how close the reference values are."""
    u_ref = (np.tanh(h_ref.astype(np.float64)) * 0.999)
    dist = np.abs(np.abs(u_ref) - 0.5)
    line = f"fsq values={dist.size} min_dist_to_boundary={dist.min():.3g}"
    for eps in (1e-3, 1e-4, 1e-5, 1e-6):
        line += f" <{eps:g}:{int((dist < eps).sum())}"
    if h_cpp is not None and h_cpp.shape == h_ref.shape:
        du = np.abs(np.tanh(h_cpp.astype(np.float64)) * 0.999 - u_ref)
        line += f" max|du|={du.max():.3g} at_risk(dist<=|du|)={int((dist <= du).sum())}"
    print(line)


def cmd_signal(a):
    seconds = a.samples / 16000.0 if a.samples else a.seconds
    x = espeak_wave(seconds) if a.kind == "speech" else None
    kind = "espeak-ng speech" if x is not None else "synthetic voiced signal"
    if x is None:
        x = synth_wave(seconds, a.seed)
    if a.samples:
        x = x[: a.samples]
    np.save(a.out, x.astype(np.float32))
    print(f"signal: {kind}, {x.shape[0]} samples ({x.shape[0] / 16000:.3f} s)")
    return 0


def cmd_compare(a):
    sd = load_tokenizer_state(a.ckpt)
    if a.f16_weights:
        round_linear_weights_f16(sd)
    wav = np.load(a.wav).astype(np.float32).reshape(-1)
    tokens, h, dumps = reference(sd, wav, a.max_tokens)
    ok = True
    cpp = np.load(a.tokens)
    if cpp.shape != tokens.shape or not np.array_equal(cpp.astype(np.int64), tokens.astype(np.int64)):
        ok = False
        if cpp.shape != tokens.shape:
            print(f"FAIL tokens: shape {cpp.shape} vs reference {tokens.shape}")
        else:
            bad = np.nonzero(cpp != tokens)[0]
            print(f"FAIL tokens: {bad.size} of {tokens.size} differ, first at {bad[0]}: "
                  f"{int(cpp[bad[0]])} vs {int(tokens[bad[0]])}")
    else:
        print(f"ok   tokens: {tokens.size} identical (distinct {np.unique(tokens).size}, "
              f"range {tokens.min()}..{tokens.max()})")
    h_cpp = None
    if a.proj:
        h_cpp = np.load(a.proj)
        e = rel_err(h_cpp, h.numpy())
        good = e <= a.rtol
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} project_down {list(h.shape)} rel {e:.3g} (tol {a.rtol:g}, "
              f"max|ref| {float(h.abs().max()):.3g})")
    boundary_report(h.numpy(), h_cpp)
    if a.dump_dir:
        for name, ref in dumps.items():
            path = os.path.join(a.dump_dir, name + ".npy")
            if not os.path.exists(path):
                print(f"FAIL {name}: not dumped")
                ok = False
                continue
            e = rel_err(np.load(path), ref.numpy())
            good = e <= a.rtol
            ok &= good
            print(f"{'ok  ' if good else 'FAIL'} {name} {list(ref.shape)} rel {e:.3g}")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("signal")
    p.add_argument("out")
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--samples", type=int, default=0)
    p.add_argument("--kind", choices=("speech", "synth"), default="speech")
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("compare")
    p.add_argument("ckpt")
    p.add_argument("wav")
    p.add_argument("--tokens", required=True)
    p.add_argument("--proj")
    p.add_argument("--dump-dir")
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--f16-weights", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(2)
    return cmd_signal(a) if a.cmd == "signal" else cmd_compare(a)


if __name__ == "__main__":
    sys.exit(main())
