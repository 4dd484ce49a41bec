#!/usr/bin/python3
"""PyTorch reference of the Multilingual pipeline after T3 (upstream mtl_tts.py generate:
drop_invalid_tokens, s3gen.inference with the built-in conds.pt, the tail trim), chained from the
stage references already checked on their own (flow_reference.py, cfm_reference.py,
hift_reference.py), on the Multilingual checkpoint's s3gen.pt, for tests/test_mtl_audio_parity.sh.

  mtl_audio_reference.py inputs CKPT_DIR OUT_DIR --seed N --n-tokens N
      tokens.npy: T3-like output (SOS early, ids >= 6561 inside, EOS then more ids), and the draws
      for its post-processed length: cfm_noise.npy [80, T], phases.npy [9], hift_noise.npy [9, 480 (T - Tm)]
  mtl_audio_reference.py check CKPT_DIR IN_DIR --wave W.npy --speech S.npy [--rtol R]
      post-processing must match exactly (upstream drop_invalid_tokens, then our filter of ids
      >= 6561 that upstream's flow embedding could not take); the waveform within rel. L2 R.

Exit 0 on success, 1 on a mismatch (with a message).
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cfm_reference  # noqa: E402
import flow_reference  # noqa: E402
import hift_reference  # noqa: E402

SOS, EOS, S3_VOCAB = 6561, 6562, 6561
SAMPLES_PER_TOKEN = 960


def load_s3gen_pt(ckpt_dir, prefix):
    sd = torch.load(os.path.join(ckpt_dir, "s3gen.pt"), map_location="cpu", weights_only=True)
    return {k[len(prefix):]: (v.float() if v.is_floating_point() else v) for k, v in sd.items()
            if k.startswith(prefix)}


def drop_invalid_tokens(x):
    """upstream models/s3tokenizer/__init__.py (one SOS / EOS at most, as it assumes)."""
    s = int((x == SOS).nonzero()[0, 0]) + 1 if (x == SOS).any() else 0
    e = int((x == EOS).nonzero()[0, 0]) if (x == EOS).any() else None
    return x[s:e]


def postprocess(tokens):
    x = drop_invalid_tokens(torch.from_numpy(tokens.astype(np.int64)))
    return x[x < S3_VOCAB]


def voice(ckpt_dir):
    gen = torch.load(os.path.join(ckpt_dir, "conds.pt"), map_location="cpu")["gen"]
    feat = gen["prompt_feat"]
    return (gen["prompt_token"].reshape(-1).to(torch.int32), feat.reshape(feat.shape[-2], feat.shape[-1]).float(),
            gen["embedding"].reshape(-1).float())


def cmd_inputs(a):
    os.makedirs(a.out_dir, exist_ok=True)
    g = np.random.default_rng(a.seed)
    n = a.n_tokens
    toks = g.integers(0, S3_VOCAB, n + 6).astype(np.int32)
    toks[1] = SOS            # everything before it is dropped
    toks[4] = 7000           # ids S3Gen cannot take
    toks[6] = 8193
    toks[n + 2] = EOS        # cut here; the rest is dropped
    np.save(os.path.join(a.out_dir, "tokens.npy"), toks)
    speech = postprocess(toks)
    prompt_token, prompt_feat, _ = voice(a.ckpt_dir)
    T = 2 * (len(prompt_token) + len(speech))
    Tm = prompt_feat.shape[0]
    np.save(os.path.join(a.out_dir, "cfm_noise.npy"), g.standard_normal((80, T)).astype(np.float32))
    H = hift_reference.NB_HARMONICS + 1
    np.save(os.path.join(a.out_dir, "phases.npy"), ((g.random(H) * 2 - 1) * np.pi).astype(np.float32))
    np.save(os.path.join(a.out_dir, "hift_noise.npy"),
            g.standard_normal((H, hift_reference.SPF * (T - Tm))).astype(np.float32))


def cmd_check(a):
    torch.set_num_threads(2)
    ld = lambda n: np.load(os.path.join(a.in_dir, n))
    speech = postprocess(ld("tokens.npy"))
    got_speech = np.load(a.speech)
    ok = True
    if not np.array_equal(got_speech.astype(np.int64), speech.numpy()):
        print("FAIL: post-processed tokens differ: C++ %s, reference %s" % (got_speech.tolist(), speech.tolist()))
        ok = False
    else:
        print("ok   post-processing: %d T3 tokens -> %d speech tokens" % (len(ld("tokens.npy")), len(speech)))

    prompt_token, prompt_feat, embedding = voice(a.ckpt_dir)
    flow_reference.load_safetensors = lambda path, prefix: load_s3gen_pt(a.ckpt_dir, prefix)
    hift_reference.load_mel2wav = lambda path: load_s3gen_pt(a.ckpt_dir, "mel2wav.")
    with torch.no_grad():
        mu, cond, spks = flow_reference.FlowEncoderRef(a.ckpt_dir).forward(
            speech.to(torch.int32), prompt_token, prompt_feat, embedding, {})
        est = cfm_reference.Estimator(cfm_reference.load_estimator(a.ckpt_dir))
        z = torch.from_numpy(ld("cfm_noise.npy"))[None]
        T = z.shape[-1]
        x = cfm_reference.solve(est, z, torch.ones(1, 1, T), mu.reshape(1, 80, T), spks.reshape(1, 80),
                                cond.reshape(1, 80, T), lambda k, x: None)
        mel = x[0, :, prompt_feat.shape[0]:]
        wav, _ = hift_reference.Hift(a.ckpt_dir).forward(mel, torch.from_numpy(ld("phases.npy")),
                                                         torch.from_numpy(ld("hift_noise.npy")))
    wav = hift_reference.trim_fade(wav)
    wav = wav[:max(1, len(speech) - 1) * SAMPLES_PER_TOKEN].numpy()

    got = np.load(a.wave)
    if got.shape != wav.shape:
        print("FAIL: waveform shape %s, reference %s" % (got.shape, wav.shape))
        return 1
    r, m = hift_reference.rel_l2(got, wav)
    print("%s waveform [%d] rel L2 %.3e (tolerance %g), max|diff| %.3e, rms %.4f" % (
        "ok  " if r <= a.rtol else "FAIL", len(wav), r, a.rtol, m, float(np.sqrt(np.mean(wav ** 2)))))
    ok = ok and r <= a.rtol and np.all(got[:480] == 0)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("inputs")
    p.add_argument("ckpt_dir")
    p.add_argument("out_dir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-tokens", type=int, default=30)
    p = sub.add_parser("check")
    p.add_argument("ckpt_dir")
    p.add_argument("in_dir")
    p.add_argument("--wave", required=True)
    p.add_argument("--speech", required=True)
    p.add_argument("--rtol", type=float, default=1e-4)
    a = ap.parse_args()
    if a.cmd == "inputs":
        cmd_inputs(a)
        return 0
    return cmd_check(a)


if __name__ == "__main__":
    sys.exit(main())
