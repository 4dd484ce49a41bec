#!/usr/bin/env bash
# Parity of the audio front-ends (src/audio) with PyTorch / librosa / torchaudio / pyloudnorm
# semantics. The C++ side runs through `chatterbox debug-frontend`; the references run under
# Debian's /usr/bin/python3 with python3-torch and numpy. librosa, torchaudio and pyloudnorm
# are not packaged with this environment, so their functions used upstream are written out
# below from their documented definitions (librosa.filters.mel, librosa.stft,
# librosa.effects.trim, torchaudio.compliance.kaldi.fbank, torchaudio.functional.resample,
# pyloudnorm.Meter.integrated_loudness); where the real package is importable it is used
# instead. Tolerance: max|ours - ref| / max|ref| <= 1e-4 for every feature (float32 on both
# sides), |dLUFS| <= 1e-4 for loudness.
# Usage: test_audio_parity.sh BUILD_DIR   (exit 77 = skipped)
set -euo pipefail
BUILD=${1:?build dir}
CLI="$BUILD/bin/chatterbox"
PY=/usr/bin/python3
[ -x "$CLI" ] || { echo "skip: $CLI not built"; exit 77; }
[ -x "$PY" ] || { echo "skip: $PY missing"; exit 77; }
"$PY" -c "import torch, numpy" 2>/dev/null || { echo "skip: python3-torch/numpy missing"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

"$PY" - "$CLI" "$TMP" <<'PYEOF'
import math, subprocess, sys
import numpy as np
import torch

CLI, TMP = sys.argv[1], sys.argv[2]
TOL = 1e-4
torch.set_num_threads(1)
failures = []

def run(kind, arr, *extra, dtype=np.float32):
    src = f"{TMP}/{kind}_in.npy"
    dst = f"{TMP}/{kind}_out.npy"
    np.save(src, np.ascontiguousarray(arr, dtype=dtype))
    subprocess.run([CLI, "debug-frontend", "--kind", kind, "--in", src, "--out", dst, *extra],
                   check=True, stdout=subprocess.DEVNULL)
    return np.load(dst)

def check(name, ours, ref, tol=TOL):
    ref = np.asarray(ref)
    if ours.shape != ref.shape:
        failures.append(name)
        print(f"FAIL {name}: shape {ours.shape} vs reference {ref.shape}")
        return
    err = float(np.max(np.abs(ours.astype(np.float64) - ref.astype(np.float64))))
    scale = float(np.max(np.abs(ref))) or 1.0
    rel = err / scale
    ok = rel <= tol
    if not ok:
        failures.append(name)
    print(f"{'ok  ' if ok else 'FAIL'} {name:14s} shape {str(ours.shape):14s} max|d|/max|ref| = {rel:.3e}")

# ---------------- test signals ----------------
def voice_like(sr, seconds, seed):
    rng = np.random.default_rng(seed)
    n = int(seconds * sr) + 17
    t = np.arange(n) / sr
    f0 = 140 + 30 * np.sin(2 * np.pi * 1.3 * t)
    ph = 2 * np.pi * np.cumsum(f0) / sr
    y = sum((0.3 / k) * np.sin(k * ph + 0.7 * k) for k in range(1, 25) if k * 170 < sr / 2)
    y = y * (0.6 + 0.4 * np.sin(2 * np.pi * 0.7 * t)) + 0.01 * rng.standard_normal(n)
    y[: int(0.3 * sr)] *= 1e-3          # quiet lead-in (trim, log floors)
    return y.astype(np.float32)

x16 = voice_like(16000, 3.3, 1)
x24 = voice_like(24000, 3.3, 2)

# ---------------- librosa.filters.mel (slaney scale + slaney norm) ----------------
def hz_to_mel(f):
    f = np.asanyarray(f, dtype=np.float64)
    f_sp = 200.0 / 3
    mels = f / f_sp
    logstep = np.log(6.4) / 27.0
    return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-30) / 1000.0) / logstep, mels)

def mel_to_hz(m):
    m = np.asanyarray(m, dtype=np.float64)
    f_sp = 200.0 / 3
    logstep = np.log(6.4) / 27.0
    return np.where(m >= 15.0, 1000.0 * np.exp(logstep * (m - 15.0)), f_sp * m)

def librosa_mel(sr, n_fft, n_mels, fmin=0.0, fmax=None):
    fmax = sr / 2 if fmax is None else fmax
    fftfreqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    w = np.zeros((n_mels, 1 + n_fft // 2), dtype=np.float32)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        w[i] = np.maximum(0, np.minimum(lower, upper))
    w *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]
    return w

try:
    import librosa  # noqa: F401
    HAVE_LIBROSA = True
except Exception:
    HAVE_LIBROSA = False
if HAVE_LIBROSA:
    import librosa
    for args in [(16000, 400, 128), (24000, 1920, 80, 0, 8000), (16000, 400, 40, 0, 8000)]:
        check(f"melfb{args[2]}", librosa_mel(*args), librosa.filters.mel(sr=args[0], n_fft=args[1], n_mels=args[2], **({"fmin": args[3], "fmax": args[4]} if len(args) > 3 else {})))

# ---------------- (a) S3 tokenizer log-mel (s3tokenizer.py log_mel_spectrogram) ----------------
def ref_s3tok(wav):
    audio = torch.from_numpy(wav)
    stft = torch.stft(audio, 400, 160, window=torch.hann_window(400), return_complex=True)
    mag = stft[..., :-1].abs() ** 2
    mel = torch.from_numpy(librosa_mel(16000, 400, 128)) @ mag
    log_spec = torch.clamp(mel, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).numpy()

check("s3tok", run("s3tok", x16), ref_s3tok(x16))

# ---------------- (b) S3Gen 24 kHz log-mel (s3gen/utils/mel.py), transposed to [T, 80] ----------------
def ref_s3gen(wav):
    y = torch.from_numpy(wav)[None]
    p = (1920 - 480) // 2
    y = torch.nn.functional.pad(y.unsqueeze(1), (p, p), mode="reflect").squeeze(1)
    spec = torch.view_as_real(torch.stft(y, 1920, hop_length=480, win_length=1920,
                                         window=torch.hann_window(1920), center=False,
                                         pad_mode="reflect", normalized=False, onesided=True,
                                         return_complex=True))
    spec = torch.sqrt(spec.pow(2).sum(-1) + 1e-9)
    spec = torch.matmul(torch.from_numpy(librosa_mel(24000, 1920, 80, 0, 8000)), spec)
    return torch.log(torch.clamp(spec, min=1e-5))[0].T.numpy()

check("s3gen", run("s3gen", x24), ref_s3gen(x24))

# ---------------- (c) Kaldi fbank + CMN (xvector.py extract_feature) ----------------
def kaldi_fbank_written_out(wav):
    w = torch.from_numpy(wav)
    win, hop, nfft = 400, 160, 512
    m = 1 + (w.numel() - win) // hop
    frames = w.as_strided((m, win), (hop, 1))
    frames = frames - frames.mean(dim=1, keepdim=True)
    prev = torch.nn.functional.pad(frames.unsqueeze(0), (1, 0), mode="replicate").squeeze(0)[:, :-1]
    frames = frames - 0.97 * prev
    frames = frames * torch.hann_window(win, periodic=False).pow(0.85)
    frames = torch.nn.functional.pad(frames, (0, nfft - win))
    power = torch.fft.rfft(frames).abs().pow(2)
    mel = lambda f: 1127.0 * math.log(1.0 + f / 700.0)
    ml, mh = mel(20.0), mel(8000.0)
    d = (mh - ml) / 81
    b = torch.arange(80, dtype=torch.float32).unsqueeze(1)
    left, center, right = ml + b * d, ml + (b + 1.0) * d, ml + (b + 2.0) * d
    fm = 1127.0 * (1.0 + (16000 / nfft) * torch.arange(nfft // 2, dtype=torch.float32) / 700.0).log()
    up = (fm - left) / (center - left)
    down = (right - fm) / (right - center)
    banks = torch.clamp(torch.min(up, down), min=0.0)
    banks = torch.nn.functional.pad(banks, (0, 1))
    e = power @ banks.T
    return torch.clamp(e, min=torch.finfo(torch.float32).eps).log()

def ref_fbank(wav):
    try:
        import torchaudio.compliance.kaldi as K
        f = K.fbank(torch.from_numpy(wav)[None], num_mel_bins=80, dither=0.0)
        src = "torchaudio"
    except Exception:
        f = kaldi_fbank_written_out(wav)
        src = "written-out"
    return (f - f.mean(dim=0, keepdim=True)).numpy(), src

ref, src = ref_fbank(x16)
print(f"     (fbank reference: {src})")
check("fbank", run("fbank", x16), ref)

# ---------------- (d) voice-encoder mel (voice_encoder/melspec.py), transposed to [T, 40] ----------------
def ref_ve(wav):
    n_fft, hop = 400, 160
    y = np.pad(wav, n_fft // 2, mode="reflect")
    m = 1 + (len(y) - n_fft) // hop
    frames = np.lib.stride_tricks.as_strided(y, (m, n_fft), (hop * 4, 4))
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    spec = np.fft.rfft(window * frames, axis=-1).astype(np.complex64)
    power = np.abs(spec) ** 2
    return (librosa_mel(16000, n_fft, 40, 0, 8000) @ power.T).T

check("ve", run("ve", x16), ref_ve(x16))

# librosa.effects.trim(top_db=20): frame RMS (2048 / 512, centred, zero padded), dB vs max
def ref_trim(wav, top_db=20, fl=2048, hl=512):
    y = np.pad(wav.astype(np.float64), fl // 2)
    m = 1 + (len(y) - fl) // hl
    rms2 = np.array([np.mean(y[i * hl:i * hl + fl] ** 2) for i in range(m)])
    db = 10 * np.log10(np.maximum(1e-10, rms2)) - 10 * np.log10(max(1e-10, rms2.max()))
    nz = np.flatnonzero(db > -top_db)
    if nz.size == 0:
        return np.array([0, 0])
    return np.array([nz[0] * hl, min(len(wav), (nz[-1] + 1) * hl)])

ours = run("ve-trim", x16)
ok = np.array_equal(ours, ref_trim(x16))
print(f"{'ok  ' if ok else 'FAIL'} ve-trim        {ours.tolist()} vs {ref_trim(x16).tolist()}")
if not ok:
    failures.append("ve-trim")

# ---------------- HiFT STFT / iSTFT (n_fft 16, hop 4, periodic Hann, center) ----------------
s = (0.5 * np.tanh(3 * x24[:24000])).astype(np.float32)
st = torch.stft(torch.from_numpy(s), 16, 4, 16, window=torch.hann_window(16), center=True,
                pad_mode="reflect", return_complex=True)
check("stft16", run("stft", s), torch.view_as_real(st).permute(1, 0, 2).numpy())
rng = np.random.default_rng(3)
frames = 1201
spec = (np.exp(rng.standard_normal((frames, 9)) * 0.5) *
        np.exp(1j * rng.uniform(-np.pi, np.pi, (frames, 9)))).astype(np.complex64)
ri = np.stack([spec.real, spec.imag], -1).astype(np.float32)
ref = torch.istft(torch.from_numpy(spec.T.copy()), 16, 4, 16, window=torch.hann_window(16),
                  center=True).numpy()
check("istft16", run("istft", ri), ref)

# ---------------- torchaudio Resample(24000, 16000) (sinc_interp_hann, width 6, rolloff 0.99) ----------------
def ref_resample_sinc(wav, orig, new, lw=6, rolloff=0.99):
    try:
        import torchaudio.functional as AF
        return AF.resample(torch.from_numpy(wav), orig, new).numpy(), "torchaudio"
    except Exception:
        pass
    g = math.gcd(orig, new)
    o, nw = orig // g, new // g
    base = min(o, nw) * rolloff
    width = math.ceil(lw * o / base)
    idx = torch.arange(-width, width + o, dtype=torch.float64)[None, None] / o
    t = torch.arange(0, -nw, -1, dtype=torch.float64)[:, None, None] / nw + idx
    t = (t * base).clamp(-lw, lw)
    win = torch.cos(t * math.pi / lw / 2) ** 2
    t = t * math.pi
    k = torch.where(t == 0, torch.tensor(1.0, dtype=torch.float64), t.sin() / t) * win * (base / o)
    k = k.to(torch.float32)
    w = torch.from_numpy(wav)[None]
    L = w.shape[-1]
    w = torch.nn.functional.pad(w, (width, width + o))
    y = torch.nn.functional.conv1d(w[:, None], k, stride=o).transpose(1, 2).reshape(1, -1)
    return y[0, : math.ceil(nw * L / o)].numpy(), "written-out"

ref, src = ref_resample_sinc(x24, 24000, 16000)
print(f"     (resample reference: {src})")
check("resample-sinc", run("resample-sinc", x24), ref)
try:
    import soxr
    check("resample-soxr", run("resample-soxr", x24),
          np.pad(soxr.resample(x24, 24000, 16000, "HQ"), (0, 0))[: math.ceil(len(x24) * 2 / 3)])
except ImportError:
    y = run("resample-soxr", x24)
    ok = y.shape == (math.ceil(len(x24) * 2 / 3),)
    # No python-soxr here: only check length and that the pass band agrees with the sinc path.
    d = np.max(np.abs(y[2000:-2000] - ref[2000:-2000])) / np.max(np.abs(ref))
    ok = ok and d < 2e-2
    print(f"{'ok  ' if ok else 'FAIL'} resample-soxr  (python-soxr absent: length + vs sinc path, rel {d:.2e})")
    if not ok:
        failures.append("resample-soxr")

# ---------------- BS.1770 integrated loudness (pyloudnorm) ----------------
def lfilter(b, a, x):
    b = np.asarray(b) / a[0]
    a = np.asarray(a) / a[0]
    y = np.empty(len(x))
    z1 = z2 = 0.0
    for i, v in enumerate(x.astype(np.float64)):
        o = b[0] * v + z1
        z1 = b[1] * v - a[1] * o + z2
        z2 = b[2] * v - a[2] * o
        y[i] = o
    return y

def ref_loudness(data, rate):
    try:
        import pyloudnorm
        return pyloudnorm.Meter(rate).integrated_loudness(data)
    except ImportError:
        pass
    def shelf(G, Q, fc):
        A = 10 ** (G / 40.0); w0 = 2 * np.pi * fc / rate; al = np.sin(w0) / (2 * Q); c = np.cos(w0)
        return ([A * ((A + 1) + (A - 1) * c + 2 * np.sqrt(A) * al), -2 * A * ((A - 1) + (A + 1) * c),
                 A * ((A + 1) + (A - 1) * c - 2 * np.sqrt(A) * al)],
                [(A + 1) - (A - 1) * c + 2 * np.sqrt(A) * al, 2 * ((A - 1) - (A + 1) * c),
                 (A + 1) - (A - 1) * c - 2 * np.sqrt(A) * al])
    def hp(Q, fc):
        w0 = 2 * np.pi * fc / rate; al = np.sin(w0) / (2 * Q); c = np.cos(w0)
        return [(1 + c) / 2, -(1 + c), (1 + c) / 2], [1 + al, -2 * c, 1 - al]
    x = data.copy()
    x[:] = lfilter(*shelf(4.0, 1 / np.sqrt(2), 1500.0), x)  # stored back into float32, as pyloudnorm
    x[:] = lfilter(*hp(0.5, 38.0), x)
    Tg, step = 0.4, 0.25
    T = len(x) / rate
    nb = int(np.round((T - Tg) / (Tg * step))) + 1
    z = np.array([(1.0 / (Tg * rate)) * np.sum(np.square(x[int(Tg * (j * step) * rate):int(Tg * (j * step + 1) * rate)].astype(np.float64))) for j in range(nb)])
    with np.errstate(divide="ignore"):
        l = -0.691 + 10 * np.log10(z)
    g = l >= -70.0
    if not g.any():
        return -np.inf
    gr = -0.691 + 10 * np.log10(z[g].mean()) - 10.0
    g2 = (l > gr) & (l > -70.0)
    if not g2.any():
        return -np.inf
    return -0.691 + 10 * np.log10(z[g2].mean())

for name, sig, rate in [("loudness24k", x24, 24000), ("loudness16k", x16, 16000)]:
    ours = float(run("loudness", sig, "--sr-in", str(rate))[0])
    ref = ref_loudness(sig, rate)
    ok = abs(ours - ref) <= 1e-4
    print(f"{'ok  ' if ok else 'FAIL'} {name:14s} {ours:.5f} vs {ref:.5f} LUFS")
    if not ok:
        failures.append(name)

if failures:
    print("FAILED:", ", ".join(failures))
    sys.exit(1)
print("all audio parity checks passed")
PYEOF
