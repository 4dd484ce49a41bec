#!/usr/bin/env bash
# Writes seeds for fuzz_torch_pt into a corpus directory: small torch.save files (mode byte 0)
# and their data.pkl alone (mode byte 1). Uses Debian's torch when present, else pickles of
# plain containers made with Python's pickle and zipfile modules.
# Usage: scripts/fuzz_seed_torch_pt.sh CORPUS_DIR
set -euo pipefail
dir=${1:?usage: $0 CORPUS_DIR}
mkdir -p "$dir"
/usr/bin/python3 - "$dir" <<'PY'
import collections, io, os, pickle, sys, zipfile
out = sys.argv[1]
objs = {}
try:
    import torch
    torch.manual_seed(0)
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    objs["conds"] = {"t3": {"speaker_emb": torch.randn(1, 4), "clap_emb": None,
                            "cond_prompt_speech_tokens": torch.arange(3).reshape(1, 3), "emotion_adv": 0.5 * torch.ones(1, 1, 1)},
                     "gen": {"prompt_token_len": torch.tensor([2]), "prompt_feat_len": None}}
    objs["views"] = collections.OrderedDict(t=base.t(), s=base[1:, ::2], e=torch.ones(2, 1).expand(2, 3),
                                            h=torch.ones(2).half(), b=torch.ones(2).bfloat16(), d=torch.ones(1, dtype=torch.float64))
    objs["linear"] = torch.nn.Linear(2, 2).state_dict()
    objs["param"] = {"p": torch.nn.Parameter(torch.ones(2)), "n": [1, -2, 2**40, True, "x", (1, 2, 3, 4)]}
    save = lambda o: (lambda b: (torch.save(o, b), b.getvalue())[1])(io.BytesIO())
except ImportError:
    objs["plain"] = {"a": [1, 2, 3], "b": {"c": None, "d": (True, False)}, "e": "text", "f": 2**40}
    objs["odict"] = collections.OrderedDict(x=1, y=[(), (1,), (1, 2)])
    def save(o):
        b = io.BytesIO()
        with zipfile.ZipFile(b, "w", zipfile.ZIP_STORED) as z:
            z.writestr("archive/data.pkl", pickle.dumps(o, protocol=2))
            z.writestr("archive/version", "3\n")
        return b.getvalue()
for k, o in objs.items():
    pt = save(o)
    open(os.path.join(out, "seed_pt_" + k), "wb").write(b"\x00" + pt)
    z = zipfile.ZipFile(io.BytesIO(pt))
    pkl = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
    # Storage keys in the pickle-only mode must be "0".."9" (served by the target).
    open(os.path.join(out, "seed_pkl_" + k), "wb").write(b"\x01" + z.read(pkl))
PY
