#!/usr/bin/env python3
"""The quantization quality table of docs/quantization.md, rerunnable by anyone.

For each storage type: a full-size synthetic Turbo checkpoint (chatterbox-mkckpt) is converted
with `chatterbox convert --type T` (plus the pre-policy layout `--type q4_0 --s3gen-type q4_0`,
labelled q4_0+s3q4), then

  size_mb        the GGUF file size
  t3_tok_s, rtf, peak_rss_mb
                 from `chatterbox-bench turbo` (--tokens forced tokens, default 250; the built-in voice):
                 median of --reps runs, the types interleaved run by run
  logits_snr_db  T3 raw logits against the f32 model's over a greedy run (`chatterbox debug t3
                 --greedy`), over the steps whose history is still the same (the steps up to and
                 including the first one whose greedy token differs); `prefix` counts them
  agree          greedy tokens equal to the f32 model's at the same step, of the f32 run's count
  mel_snr_db     S3Gen (flow encoder + CFM, `debug flow` + `debug cfm`) on the f32 run's speech
                 tokens with the same noise (seed 0), against the f32 model's mel
  wave_snr_db    HiFT (`debug hift`, seed 0) on that mel, against the f32 model's waveform

SNR = 10 log10(sum ref^2 / sum (ref - x)^2). Python 3 standard library only.
Usage: scripts/quant_quality.py [--build build] [--work /tmp/cbx-quant] [--reps 3] [--steps 100]
                                [--tokens 250] [--threads 2] [--types f16,q8_0,q4_k,q4_0,q4_0+s3q4] [--size full|tiny]
                                [--ckpt DIR] [--keep]
The work directory holds ~7 GB (checkpoint and GGUFs); it is removed at the end unless --keep.
"""
import argparse
import array
import json
import math
import os
import platform
import re
import shutil
import statistics
import struct
import subprocess
import sys
import time

# label -> extra convert flags; f32 is the reference and always converted.
TYPE_FLAGS = {
    "f32": ["--type", "f32"],
    "f16": ["--type", "f16"],
    "q8_0": ["--type", "q8_0"],
    "q4_0": ["--type", "q4_0"],
    "q4_k": ["--type", "q4_k"],
    "q4_0+s3q4": ["--type", "q4_0", "--s3gen-type", "q4_0"],
    "q8_0+s3q8": ["--type", "q8_0", "--s3gen-type", "q8_0"],
}

# Fixed GPT-2 ids of an English sentence (taken modulo the text vocabulary of a tiny model): only
# the same ids for every model matter here.
TEXT_IDS = [15496, 612, 11, 428, 318, 257, 2068, 1332, 286, 262, 5554, 1143, 2746, 13, 632, 815,
            2128, 262, 976, 355, 262, 2656, 11, 655, 4833, 290, 5443, 13]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd):
    log("+ " + " ".join(cmd))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"quant_quality.py: '{' '.join(cmd)}' failed (exit {p.returncode}):\n{p.stderr}")
    return p


def npy_load(path):
    """(shape, flat list-like) of a little-endian f4 / i4 / i8 .npy file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not a .npy file")
    major = data[6]
    hlen = struct.unpack_from("<H" if major == 1 else "<I", data, 8)[0]
    off = 10 if major == 1 else 12
    header = data[off:off + hlen].decode("latin1")
    descr = re.search(r"'descr':\s*'([^']+)'", header).group(1)
    shape = tuple(int(x) for x in re.search(r"'shape':\s*\(([^)]*)\)", header).group(1).split(",") if x.strip())
    code = {"<f4": "f", "<i4": "i", "<i8": "q"}.get(descr)
    if code is None:
        raise ValueError(f"{path}: unsupported dtype {descr}")
    a = array.array(code)
    a.frombytes(data[off + hlen:])
    return shape, a


def npy_save_i32(path, values):
    header = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }" % len(values)
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(array.array("i", values).tobytes())


def snr_db(ref, x):
    if len(ref) != len(x):
        raise ValueError(f"length {len(x)} differs from the reference's {len(ref)}")
    sig = math.fsum(r * r for r in ref)
    err = math.fsum((r - v) * (r - v) for r, v in zip(ref, x))
    return math.inf if err == 0 else 10 * math.log10(sig / err)


def fmt(v, digits=1):
    if isinstance(v, float):
        return "exact" if math.isinf(v) else f"{v:.{digits}f}"
    return str(v)


def stages(bin_cli, model, out, steps, threads, ref_speech=None):
    """Runs T3 greedy, then flow + CFM + HiFT on ref_speech (default: this run's speech tokens)."""
    os.makedirs(out, exist_ok=True)
    th = ["--threads", str(threads)]
    run([bin_cli, "debug", "t3", "-m", model, "--text-ids", os.path.join(os.path.dirname(out), "ids.npy"),
         "--greedy", "--steps", str(steps), "--out-logits", f"{out}/logits.npy", "--out-tokens", f"{out}/tokens.npy",
         "--out-speech-tokens", f"{out}/speech.npy"] + th)
    speech = ref_speech or f"{out}/speech.npy"
    run([bin_cli, "debug", "flow", "-m", model, "--tokens", speech, "--out-mu", f"{out}/mu.npy", "--out-cond",
         f"{out}/cond.npy", "--out-spks", f"{out}/spks.npy"] + th)
    run([bin_cli, "debug", "cfm", "-m", model, "--mu", f"{out}/mu.npy", "--cond", f"{out}/cond.npy", "--spks",
         f"{out}/spks.npy", "--seed", "0", "--out-mel", f"{out}/mel.npy"] + th)
    run([bin_cli, "debug", "hift", "-m", model, "--mel", f"{out}/mel.npy", "--seed", "0", "--out",
         f"{out}/wave.npy"] + th)


def fidelity(ref_dir, dir_):
    _, rt = npy_load(f"{ref_dir}/tokens.npy")
    _, qt = npy_load(f"{dir_}/tokens.npy")
    n = min(len(rt), len(qt))
    agree = sum(1 for i in range(n) if rt[i] == qt[i])
    first_diff = next((i for i in range(n) if rt[i] != qt[i]), n)
    rs, rl = npy_load(f"{ref_dir}/logits.npy")
    qs, ql = npy_load(f"{dir_}/logits.npy")
    vocab = rs[1]
    rows = min(first_diff + 1, rs[0], qs[0])  # the first differing step still had the same history
    res = {
        "agree": agree,
        "steps": len(rt),
        "prefix": rows,
        "logits_snr_db": snr_db(rl[:rows * vocab], ql[:rows * vocab]),
        "mel_snr_db": snr_db(npy_load(f"{ref_dir}/mel.npy")[1], npy_load(f"{dir_}/mel.npy")[1]),
        "wave_snr_db": snr_db(npy_load(f"{ref_dir}/wave.npy")[1], npy_load(f"{dir_}/wave.npy")[1]),
    }
    return res


def bench(bin_bench, model, threads, tokens):
    p = run([bin_bench, "turbo", "-m", model, "--threads", str(threads), "--tokens", str(tokens)])
    line = [l for l in p.stdout.splitlines() if l.startswith("bench turbo")][-1]
    kv = dict(tok.split("=", 1) for tok in line.split()[2:] if "=" in tok)
    return {k: float(kv[k]) for k in ("t3_tok_s", "rtf", "peak_rss_mb", "s3gen_ms", "hift_ms")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--work", default="/tmp/cbx-quant")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=100, help="greedy T3 steps of the fidelity run")
    ap.add_argument("--tokens", type=int, default=250, help="speech tokens of each chatterbox-bench turbo run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--types", default="f16,q8_0,q4_k,q4_0,q4_0+s3q4")
    ap.add_argument("--ckpt", help="an existing Turbo checkpoint directory to convert (default: made in --work)")
    ap.add_argument("--seed", type=int, default=1, help="chatterbox-mkckpt seed")
    ap.add_argument("--size", default="full", choices=["full", "tiny"], help="chatterbox-mkckpt size (tiny: tests)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    types = ["f32"] + [t for t in a.types.split(",") if t and t != "f32"]
    for t in types:
        if t not in TYPE_FLAGS:
            ap.error(f"unknown type '{t}' (known: {', '.join(TYPE_FLAGS)})")
    bin_cli = os.path.join(a.build, "bin", "chatterbox")
    bin_mk = os.path.join(a.build, "bin", "chatterbox-mkckpt")
    bin_bench = os.path.join(a.build, "bin", "chatterbox-bench")
    for b in (bin_cli, bin_mk, bin_bench):
        if not os.access(b, os.X_OK):
            ap.error(f"{b} not built (cmake --build {a.build} --target chatterbox chatterbox-mkckpt chatterbox-bench)")

    os.makedirs(a.work, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_before = os.getloadavg()
    ckpt = a.ckpt or os.path.join(a.work, "ckpt")
    if not os.path.isdir(ckpt):
        run([bin_mk, "--variant", "turbo", "--size", a.size, "--seed", str(a.seed), ckpt])
    models = {}
    for t in types:
        models[t] = os.path.join(a.work, f"{t}.gguf")
        if not os.path.exists(models[t]):
            run([bin_cli, "convert", ckpt, "-o", models[t], "--quiet"] + TYPE_FLAGS[t])
    info = run([bin_cli, "info", models["f32"]]).stdout
    vocab = int(re.search(r"t3\.text_vocab_size\s+(\d+)", info).group(1))
    npy_save_i32(os.path.join(a.work, "ids.npy"), [i % vocab for i in TEXT_IDS])

    # Fidelity: the f32 run gives the reference and the speech tokens every S3Gen run uses.
    ref = os.path.join(a.work, "stages-f32")
    stages(bin_cli, models["f32"], ref, a.steps, a.threads)
    rows = {t: {"size_mb": os.path.getsize(models[t]) / 1e6} for t in types}
    for t in types[1:]:
        d = os.path.join(a.work, f"stages-{t}")
        stages(bin_cli, models[t], d, a.steps, a.threads, ref_speech=f"{ref}/speech.npy")
        rows[t].update(fidelity(ref, d))

    # Speed and memory: the types interleaved, so a change in the machine's load hits all alike.
    runs = {t: [] for t in types}
    for _ in range(a.reps):
        for t in types:
            runs[t].append(bench(bin_bench, models[t], a.threads, a.tokens))
    for t in types:
        for k in runs[t][0]:
            rows[t][k] = statistics.median(r[k] for r in runs[t])
        rows[t]["runs"] = runs[t]
    load_after = os.getloadavg()

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.processor())
    src = f"checkpoint {a.ckpt}" if a.ckpt else f"{a.size.capitalize()}-size synthetic Turbo (chatterbox-mkckpt --seed {a.seed})"
    print(f"{src}, {started}, {cpu}, "
          f"{os.cpu_count()} CPUs, --threads {a.threads}; load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after. Speed: medians of {a.reps} `chatterbox-bench turbo` runs "
          f"({a.tokens} tokens). Fidelity vs f32: greedy T3 run of {a.steps} steps, S3Gen/HiFT on the f32 tokens, seed 0.")
    print()
    print("| type | file MB | peak RSS MB | T3 tok/s | RTF | logits SNR dB (steps) | greedy agree | "
          "mel SNR dB | wave SNR dB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for t in types:
        r = rows[t]
        if t == "f32":
            fid = "ref | ref | ref | ref"
        else:
            fid = (f"{fmt(r['logits_snr_db'])} ({r['prefix']}) | {r['agree']}/{r['steps']} | "
                   f"{fmt(r['mel_snr_db'])} | {fmt(r['wave_snr_db'])}")
        print(f"| {t} | {r['size_mb']:.0f} | {r['peak_rss_mb']:.0f} | {r['t3_tok_s']:.1f} | {r['rtf']:.3f} | {fid} |")
    with open(os.path.join(a.work, "quant_quality.json"), "w") as f:
        json.dump(rows, f, indent=1, default=str)
    print(json.dumps(rows, default=str), file=sys.stderr)
    if not a.keep:
        shutil.rmtree(a.work, ignore_errors=True)


if __name__ == "__main__":
    main()
