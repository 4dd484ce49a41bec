#!/usr/bin/python3
"""PyTorch reference of Chatterbox's voice encoder (models/voice_encoder/*.py:
VoiceEncoder.embeds_from_wavs on one 16 kHz wave, then the mean over the batch of 1), written
from the spec (§11.1) with torch.nn.LSTM / nn.Linear on the upstream-format checkpoint
(ve.safetensors, or ve.pt for Multilingual), for tests/test_ve_parity.sh.

librosa is not packaged here, so the two librosa functions upstream calls are written out from
their documented definitions (librosa.effects.trim(top_db=20): frame RMS over 2048/512 centred,
zero-padded frames, dB against the loudest frame; melspec.py: librosa.stft(400, 160, periodic
Hann, center, reflect) power through librosa.filters.mel(16000, 400, 40, 0, 8000), Slaney);
where librosa is importable it is used instead.

  ve_reference.py compare CKPT_DIR WAV.npy --ours EMB.npy [--dump-dir DIR] [--rtol R]
      embeds WAV [n] float32 and compares with our embedding (and, with --dump-dir, with the
      trim range, mel and partial embeddings our `debug ve --dump-dir` wrote there)

Relative error = max|ours - ref| / max|ref|. Exit 0 on success, 1 on a mismatch.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}

# voice_encoder/config.py
N_MELS, SR, N_FFT, HOP, WIN = 40, 16000, 400, 160, 400
PARTIAL, RATE, MIN_COVERAGE = 160, 1.3, 0.8


def load_state(ckpt_dir):
    st = os.path.join(ckpt_dir, "ve.safetensors")
    if os.path.exists(st):
        out = {}
        with open(st, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n).decode("utf-8"))
            base = 8 + n
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                b, e = info["data_offsets"]
                f.seek(base + b)
                t = torch.frombuffer(bytearray(f.read(e - b)), dtype=DTYPES[info["dtype"]])
                out[name] = t.reshape(info["shape"]).float()
        return out
    return {k: v.float() for k, v in torch.load(os.path.join(ckpt_dir, "ve.pt"), map_location="cpu").items()}


class VoiceEncoder(torch.nn.Module):
    def __init__(self, sd):
        super().__init__()
        hidden = sd["lstm.weight_hh_l0"].shape[1]
        layers = sum(1 for k in sd if k.startswith("lstm.weight_ih_l"))
        self.lstm = torch.nn.LSTM(sd["lstm.weight_ih_l0"].shape[1], hidden, num_layers=layers, batch_first=True)
        self.proj = torch.nn.Linear(hidden, sd["proj.weight"].shape[0])
        self.similarity_weight = torch.nn.Parameter(torch.tensor([10.0]))
        self.similarity_bias = torch.nn.Parameter(torch.tensor([-5.0]))
        self.load_state_dict(sd, strict=True)
        self.eval()

    def forward(self, mels):  # [B, 160, 40] -> [B, E], L2-normalised
        _, (hidden, _) = self.lstm(mels)
        raw = torch.relu(self.proj(hidden[-1]))
        return raw / torch.linalg.norm(raw, dim=1, keepdim=True)


def slaney_mel(sr, n_fft, n_mels, fmin, fmax):
    def hz_to_mel(f):
        f = np.asanyarray(f, dtype=np.float64)
        lin = f / (200.0 / 3)
        return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-30) / 1000.0) / (np.log(6.4) / 27.0), lin)

    def mel_to_hz(m):
        m = np.asanyarray(m, dtype=np.float64)
        return np.where(m >= 15.0, 1000.0 * np.exp(np.log(6.4) / 27.0 * (m - 15.0)), (200.0 / 3) * m)

    freqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, freqs)
    w = np.zeros((n_mels, 1 + n_fft // 2), dtype=np.float32)
    for i in range(n_mels):
        w[i] = np.maximum(0, np.minimum(-ramps[i] / fdiff[i], ramps[i + 2] / fdiff[i + 1]))
    w *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]
    return w


def trim(wav, top_db=20, fl=2048, hl=512):
    try:
        import librosa
        _, idx = librosa.effects.trim(wav, top_db=top_db)
        return int(idx[0]), int(idx[1])
    except ImportError:
        pass
    y = np.pad(wav.astype(np.float64), fl // 2)
    m = 1 + (len(y) - fl) // hl
    ms = np.array([np.mean(y[i * hl:i * hl + fl] ** 2) for i in range(m)])
    db = 10 * np.log10(np.maximum(1e-10, ms)) - 10 * np.log10(max(1e-10, ms.max()))
    nz = np.flatnonzero(db > -top_db)
    if nz.size == 0:
        return 0, 0
    return int(nz[0] * hl), int(min(len(wav), (nz[-1] + 1) * hl))


def melspectrogram(wav):  # melspec.py -> [T, 40]
    try:
        import librosa
        spec = np.abs(librosa.stft(wav, n_fft=N_FFT, hop_length=HOP, win_length=WIN, center=True,
                                   pad_mode="reflect")) ** 2
        fb = librosa.filters.mel(sr=SR, n_fft=N_FFT, n_mels=N_MELS, fmin=0, fmax=8000)
        return np.dot(fb, spec).T.astype(np.float32)
    except ImportError:
        pass
    y = np.pad(wav, N_FFT // 2, mode="reflect")
    m = 1 + (len(y) - N_FFT) // HOP
    frames = np.lib.stride_tricks.as_strided(y, (m, N_FFT), (HOP * y.strides[0], y.strides[0]))
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)).astype(np.float32)
    spec = np.fft.rfft(window * frames, axis=-1).astype(np.complex64)
    power = np.abs(spec) ** 2
    return np.dot(slaney_mel(SR, N_FFT, N_MELS, 0, 8000), power.T).T.astype(np.float32)


def embed(model, wav):
    b, e = trim(wav)
    mel = melspectrogram(wav[b:e])
    # get_frame_step / get_num_wins (rate given: the overlap argument is ignored)
    step = int(np.round((SR / RATE) / PARTIAL))
    n_wins, rem = divmod(max(len(mel) - PARTIAL + step, 0), step)
    if n_wins == 0 or (rem + (PARTIAL - step)) / PARTIAL >= MIN_COVERAGE:
        n_wins += 1
    target = PARTIAL + step * (n_wins - 1)
    mels = torch.from_numpy(mel)[None]
    if target > mels.shape[1]:
        mels = torch.cat([mels, torch.zeros(1, target - mels.shape[1], N_MELS)], dim=1)
    partials = torch.stack([mels[0, i * step:i * step + PARTIAL] for i in range(n_wins)])
    with torch.inference_mode():
        pe = model(partials)
        raw = pe.mean(dim=0, keepdim=True)
        emb = raw / torch.linalg.norm(raw, dim=1, keepdim=True)
        emb = emb.mean(dim=0)  # the caller's mean over the batch of 1
    return emb.numpy(), {"trim": np.array([b, e], dtype=np.float32), "mel": mel, "partials": pe.numpy()}


def rel_err(ours, ref):
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    if ours.shape != ref.shape:
        return float("inf")
    return float(np.max(np.abs(ours - ref)) / max(np.max(np.abs(ref)), 1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["compare"])
    ap.add_argument("ckpt")
    ap.add_argument("wav")
    ap.add_argument("--ours", required=True)
    ap.add_argument("--dump-dir")
    ap.add_argument("--rtol", type=float, default=1e-4)
    a = ap.parse_args()
    torch.set_num_threads(1)
    model = VoiceEncoder(load_state(a.ckpt))
    wav = np.load(a.wav).astype(np.float32).reshape(-1)
    ref, inter = embed(model, wav)
    ok = True
    checks = [("embedding", np.load(a.ours), ref)]
    if a.dump_dir:
        checks += [(k, np.load(os.path.join(a.dump_dir, k + ".npy")), v) for k, v in inter.items()]
    for name, ours, r in checks:
        if name == "trim":
            good = np.array_equal(ours, r)
            print(f"{'ok  ' if good else 'FAIL'} {name:10s} {ours.astype(int).tolist()} vs {r.astype(int).tolist()}")
        else:
            e = rel_err(ours, r)
            good = e <= a.rtol
            print(f"{'ok  ' if good else 'FAIL'} {name:10s} shape {str(np.shape(ours)):12s} "
                  f"ref {str(np.shape(r)):12s} rel {e:.2e} (tol {a.rtol:g})")
        ok = ok and good
    print(f"     {len(inter['partials'])} partials, {len(inter['mel'])} mel frames")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
