#!/bin/bash
# Voice cloning wiring parity (tiny synthetic Turbo model, f32): `chatterbox voice create
# --dump-dir` writes the signals the VoiceBuilder fed each network and the resulting voice; the
# PyTorch references of the networks (tests/ve_reference.py, campplus_reference.py,
# s3tok_reference.py) then recompute every conditional from the signals upstream would feed them,
# and this script checks the cuts themselves in numpy:
#   speaker_emb        = VE(ref16, the whole reference)                          rel <= 1e-4
#   cond_prompt_tokens = S3Tokenizer(ref16[:15 s], max_len 375)                  identical
#   embedding          = CAMPPlus(s3gen_16)                                      rel <= 1e-4
#   prompt_token       = S3Tokenizer(s3gen_16)                                   identical
#   prompt_feat        = S3Gen log-mel(ref24[:10 s]) written out below          rel <= 1e-4
#   s3gen_16 = torchaudio sinc resample(ref24[:10 s]) written out below        rel <= 1e-4
#   loudness gain = 10^((-27 - LUFS) / 20) as `voice info` reports it
# The resamplers and loudness meter themselves are checked in test_audio_parity.sh.
# Usage: test_voice_parity.sh BUILD_DIR   (exit 77 = skipped)
set -u
BUILD=${1:?usage: test_voice_parity.sh BUILD_DIR}
# shellcheck source=cli_test_lib.bash
. "$(dirname "$0")/cli_test_lib.bash"
parity_test_init "$BUILD" test-voice-parity
for r in ve_reference.py campplus_reference.py s3tok_reference.py; do
  [ -f "$SRC/tests/$r" ] || { echo "skip: tests/$r missing"; exit 77; }
done

"$MK" --variant turbo --size tiny --seed 3 --threads 1 "$T/ckpt" > /dev/null 2>&1 || fail "mkckpt"
"$B" convert "$T/ckpt" -o "$T/m.gguf" --type f32 --quiet > /dev/null || fail "convert"

# A 17 s stereo 44.1 kHz reference (speech when espeak-ng and sox exist): longer than the 10 s
# S3Gen cut and the 15 s T3 cut, so a signal fed at the wrong length is caught.
if command -v espeak-ng > /dev/null && command -v sox > /dev/null; then
  espeak-ng -w "$T/speech.wav" "This reference recording is a little longer than ten seconds, so that the \
S3Gen part of the voice is cut at ten seconds while the T3 prompt sees all of it. One more sentence." ||
    fail "espeak-ng"
  # -R: sox dithers the rate change with a time-seeded generator unless told to repeat; a new
  # input each run once put an S3 tokenizer value 6e-7 from an FSQ rounding boundary, where f32
  # on either side may round it differently (a flaky token mismatch, not a wiring fault).
  sox -R "$T/speech.wav" "$T/speech.wav" -r 44100 -c 2 "$T/ref.wav" trim 0 17 || fail "sox"
else
  "$PY" - "$T/ref.wav" << 'EOF' || fail "synthetic reference"
import math, struct, sys, wave
# Harmonics plus low broadband noise (-50 dBFS, as a recording has): with pure harmonics the
# prompt mel's high bins sit at its 1e-5 floor, where float32 itself differs by ~1e-4 (torch
# f32 vs f64), which would test float rounding instead of the wiring.
rate, n = 44100, 17 * 44100
with wave.open(sys.argv[1], 'wb') as w:
    w.setnchannels(2); w.setsampwidth(2); w.setframerate(rate)
    fr = bytearray(); ph = 0.0; seed = 12345
    for i in range(n):
        t = i / rate; ph += 2 * math.pi * (120 + 20 * math.sin(6 * t)) / rate
        x = (0.5 + 0.5 * math.sin(8 * t)) * sum(0.3 / k * math.sin(k * ph) for k in range(1, 8))
        seed = (seed * 1103515245 + 12345) % 2147483648
        x += 0.003 * (seed / 1073741824.0 - 1.0)
        fr += struct.pack('<h', int(x * 32767)) * 2
    w.writeframes(bytes(fr))
EOF
fi

mkdir -p "$T/d"
"$B" voice create "$T/ref.wav" -m "$T/m.gguf" -o "$T/v.voice" --threads 2 --dump-dir "$T/d" 2> "$T/create.err" ||
  { cat "$T/create.err"; fail "voice create"; }
"$B" voice info "$T/v.voice" > "$T/info.txt" || fail "voice info"
cd "$SRC/tests" || fail "cd tests"

"$PY" - "$T/d" "$T/info.txt" << 'EOF' || fail "signal cuts / prompt mel / sinc resample"
import math, re, sys
import numpy as np
import torch

d, info = sys.argv[1], open(sys.argv[2]).read()
ld = lambda n: np.load(f"{d}/{n}.npy")
ref24, ref16, t3, s24, s16 = (ld(n) for n in ("ref24", "ref16", "t3_16", "s3gen_24", "s3gen_16"))
bad = []
def need(c, msg):
    if not c: bad.append(msg)
need(len(ref24) > 15 * 24000, f"the reference is only {len(ref24) / 24000:.2f} s (the test needs > 15 s)")
need(len(ref16) == math.ceil(len(ref24) * 16000 / 24000), f"ref16 has {len(ref16)} samples for {len(ref24)} at 24 kHz")
need(np.array_equal(t3, ref16[:15 * 16000]), "t3_16 is not ref16[:15 s]")
need(np.array_equal(s24, ref24[:10 * 24000]), "s3gen_24 is not ref24[:10 s]")

# torchaudio.functional.resample(24000 -> 16000), sinc_interp_hann, width 6, rolloff 0.99.
def sinc_resample(x, orig=24000, new=16000, width=6, rolloff=0.99):
    g = math.gcd(orig, new); orig //= g; new //= g
    base = min(orig, new) * rolloff
    w = math.ceil(width * orig / base)
    idx = torch.arange(-w, w + orig, dtype=torch.float64)[None, None] / orig
    t = torch.arange(0, -new, -1, dtype=torch.float64)[:, None, None] / new + idx
    t *= base; t = t.clamp(-width, width)
    win = torch.cos(t * math.pi / width / 2) ** 2
    t *= math.pi
    k = torch.where(t == 0, torch.tensor(1.0, dtype=torch.float64), t.sin() / t) * win * base / orig
    k = k.to(torch.float32)
    xs = torch.from_numpy(x)[None, None]
    xs = torch.nn.functional.pad(xs, (w, w + orig))
    y = torch.nn.functional.conv1d(xs, k, stride=orig).transpose(1, 2).reshape(-1)
    return y[: math.ceil(new * len(x) / orig)].numpy()
ref_s16 = sinc_resample(s24)
need(len(ref_s16) == len(s16), f"s3gen_16 has {len(s16)} samples, expected {len(ref_s16)}")
if len(ref_s16) == len(s16):
    e = np.abs(ref_s16 - s16).max() / np.abs(ref_s16).max()
    print(f"s3gen_16 sinc resample rel {e:.2e}")
    need(e <= 1e-4, f"s3gen_16 rel error {e:.2e}")

# librosa.filters.mel(sr=24000, n_fft=1920, n_mels=80, fmin=0, fmax=8000), Slaney scale and norm.
def hz_to_mel(f):
    f = np.asanyarray(f, dtype=np.float64); m = f / (200.0 / 3)
    lin = 1000.0 / (200.0 / 3); ls = math.log(6.4) / 27.0
    return np.where(f >= 1000, lin + np.log(np.maximum(f, 1e-10) / 1000.0) / ls, m)
def mel_to_hz(m):
    m = np.asanyarray(m, dtype=np.float64); lin = 1000.0 / (200.0 / 3); ls = math.log(6.4) / 27.0
    return np.where(m >= lin, 1000.0 * np.exp(ls * (m - lin)), (200.0 / 3) * m)
def mel_fb(sr=24000, n_fft=1920, n_mels=80, fmax=8000.0):
    fft_f = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(fmax), n_mels + 2))
    fd = np.diff(mel_f); ramps = mel_f[:, None] - fft_f[None, :]
    w = np.maximum(0, np.minimum(-ramps[:-2] / fd[:-1, None], ramps[2:] / fd[1:, None]))
    return (w * (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]).astype(np.float32)
x = torch.from_numpy(s24)[None]
x = torch.nn.functional.pad(x[None], (720, 720), mode="reflect")[0]
spec = torch.stft(x, 1920, 480, 1920, window=torch.hann_window(1920), center=False, return_complex=True)
mag = torch.sqrt(spec.real ** 2 + spec.imag ** 2 + 1e-9)
mel = torch.log(torch.clamp(torch.from_numpy(mel_fb()) @ mag[0], min=1e-5)).T.numpy()
feat = ld("prompt_feat")
need(feat.shape == mel.shape, f"prompt_feat {feat.shape}, reference {mel.shape}")
if feat.shape == mel.shape:
    e = np.abs(feat - mel).max() / np.abs(mel).max()
    print(f"prompt_feat rel {e:.2e}")
    need(e <= 1e-4, f"prompt_feat rel error {e:.2e}")
tp = len(ld("prompt_token"))
need(feat.shape[0] in (2 * tp, 2 * tp + 1), f"{feat.shape[0]} prompt frames for {tp} prompt tokens")

lufs = float(re.search(r"loudness: +(-?[0-9.]+) LUFS", info).group(1))
gain = float(re.search(r"gain ([0-9.]+)", info).group(1))
want = 10 ** ((-27 - lufs) / 20)
need(abs(gain - want) <= 1e-3 * want, f"gain {gain} for {lufs} LUFS, expected {want:.4f}")
for b in bad: print("mismatch:", b)
sys.exit(1 if bad else 0)
EOF

"$PY" ve_reference.py compare "$T/ckpt" "$T/d/ref16.npy" --ours "$T/d/speaker_emb.npy" ||
  fail "speaker_emb differs from VE(ref16)"
"$PY" s3tok_reference.py compare "$T/ckpt" "$T/d/t3_16.npy" --tokens "$T/d/cond_prompt_tokens.npy" \
  --max-tokens 375 || fail "cond_prompt_tokens differ from S3Tokenizer(ref16[:15 s], 375)"
"$PY" campplus_reference.py compare "$T/ckpt" --wav "$T/d/s3gen_16.npy" --ours "$T/d/embedding.npy" ||
  fail "embedding differs from CAMPPlus(s3gen_16)"
"$PY" s3tok_reference.py compare "$T/ckpt" "$T/d/s3gen_16.npy" --tokens "$T/d/prompt_token.npy" ||
  fail "prompt_token differs from S3Tokenizer(s3gen_16)"

echo "test_voice_parity: OK"
