#!/usr/bin/env bash
# Seeds for fuzz_text_mtl: byte 0 < 0xF0 picks the language (index into the 23 codes, 23 = an
# unsupported one) and the rest is text; byte 0 >= 0xF0 is followed by a tokenizer JSON.
# Usage: scripts/fuzz_seed_text_mtl.sh CORPUS_DIR
set -euo pipefail
dir=${1:?usage: $0 CORPUS_DIR}
mkdir -p "$dir"
/usr/bin/python3 - "$dir" <<'PY'
import json, os, sys

out = sys.argv[1]
codes = ["ar", "da", "de", "el", "en", "es", "fi", "fr", "he", "hi", "it", "ja",
         "ko", "ms", "nl", "no", "pl", "pt", "ru", "sv", "sw", "tr", "zh", "xx"]
texts = {"ar": "مرحبا بكم، 25!", "el": "ΟΔΟΣ Αθηνών.", "en": "Hello, world: 12.5!", "fr": "Ça va? Très bien.",
         "he": "שלום, מה שלומך?", "hi": "नमस्ते, आप कैसे हैं?", "ja": "カタカナ と ひらがな、東京。ｶﾞ",
         "ko": "안녕하세요, 만나서!", "ru": "Ёлка, привет!", "tr": "İSTANBUL'da", "zh": "你好，世界！2024年 ok",
         "xx": "unsupported"}
for i, (lang, t) in enumerate(texts.items()):
    with open(os.path.join(out, "text_%02d" % i), "wb") as f:
        f.write(bytes([codes.index(lang)]) + t.encode())
vocab = {"[STOP]": 0, "[UNK]": 1, "[SPACE]": 2, "[START]": 3, "a": 4, "b": 5, "ab": 6, "[CLS]": 7, "[SEP]": 8}
added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
          "normalized": False, "special": True} for t, i in vocab.items() if t.startswith("[")]
model = {"type": "BPE", "unk_token": "[UNK]", "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": ["a b"]}
seeds = [
    {"added_tokens": added, "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "model": model},
    {"added_tokens": added + [{"id": 9, "content": "hello", "single_word": True, "lstrip": True, "rstrip": True,
                               "normalized": True, "special": False}],
     "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "Lowercase"}, {"type": "StripAccents"},
                                                         {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]},
     "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Punctuation"},
                                                             {"type": "Digits", "individual_digits": True},
                                                             {"type": "Split", "pattern": {"String": "b"},
                                                              "behavior": "MergedWithNext", "invert": False}]},
     "post_processor": {"type": "BertProcessing", "cls": ["[CLS]", 7], "sep": ["[SEP]", 8]},
     "truncation": {"max_length": 16, "direction": "Left"},
     "padding": {"strategy": {"Fixed": 20}, "direction": "Right", "pad_id": 0},
     "model": dict(model, fuse_unk=True, ignore_merges=True)},
]
# Integer fields out of range or not integers (session 15's finding: a cls id of 5.5e72 was
# converted to int unchecked); each must be an error naming the field.
bad = dict(seeds[1])
bad["post_processor"] = {"type": "BertProcessing", "cls": ["[CLS]", 5.5e72], "sep": ["[SEP]", -8]}
bad["truncation"] = {"max_length": 1e30, "direction": "Left"}
bad["padding"] = {"strategy": {"Fixed": -20}, "direction": "Right", "pad_id": 2.5}
seeds.append(bad)
for i, j in enumerate(seeds):
    with open(os.path.join(out, "json_%02d" % i), "wb") as f:
        f.write(b"\xf0" + json.dumps(j, ensure_ascii=False).encode())
PY
