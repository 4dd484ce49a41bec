#!/usr/bin/python3
"""Independent pure-Python reference of the Multilingual text tokenizer (tests/test_text_mtl.cpp).

Re-implements, from the same tokenizer JSON, upstream MTLTokenizer.encode (chatterbox
models/tokenizers/tokenizer.py) with the language steps we can reproduce, and the Hugging Face
`tokenizers` encode semantics (the `tokenizers` package itself is not installed here):
  str.lower, unicodedata NFKD, the Cangjie rule (cj2word[code].index(char)), Korean jamo + strip,
  "[xx]" tag, " " -> "[SPACE]", added tokens (leftmost-longest; non-normalized on the raw text,
  normalized ones after the normalizer), normalizers, the Whitespace pre-tokenizer regex with Rust
  Unicode classes (via the `regex` module), BPE by repeatedly merging the lowest-(rank, position)
  adjacent pair, post-processor templates.
Chinese segmentation (pkuseg upstream, ICU in C++) cannot be reproduced here: the request passes
the C++ segmentation, which is checked to only insert spaces, and everything after it is compared.

usage: mtl_tokenizer_reference.py REQUEST.json OUT.json
       mtl_tokenizer_reference.py --unicode-table OUT.tsv   (see unicode_table)
REQUEST: {"tokenizer": path, "cangjie": path or null,
          "cases": [{"lang": "fr", "text": "...", "segmented": "..." (zh only)}],
          "raw": ["string encoded with the HF tokenizer alone", ...]}
OUT:     {"cases": [{"prepared": "...", "ids": [...]}], "raw": [[...], ...]}
"""
import json
import sys
import unicodedata

import regex

WORD = r"\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}"
WS_RE = regex.compile(r"[" + WORD + r"]+|[^" + WORD + r"\p{White_Space}]+")


def is_ws(c):
    return regex.match(r"\p{White_Space}", c) is not None


def is_word(c):
    return regex.match(r"[" + WORD + r"]", c) is not None


def is_punct(c):
    return (c.isascii() and not c.isalnum() and 0x21 <= ord(c) <= 0x7E) or unicodedata.category(c).startswith("P")


def rust_lower(s):
    out = []
    for c in s:
        out.append("\u03c3" if c == "\u03a3" else c.lower())  # per char: no final-sigma context
    return "".join(out)


class Normalizer:
    def __init__(self, j):
        self.ops = []
        self._parse(j)

    def _parse(self, j):
        if j is None:
            return
        if j["type"] == "Sequence":
            for k in j["normalizers"]:
                self._parse(k)
        else:
            self.ops.append(j)

    def __call__(self, s):
        for op in self.ops:
            t = op["type"]
            if t == "Lowercase":
                s = rust_lower(s)
            elif t in ("NFD", "NFKD", "NFC", "NFKC"):
                s = unicodedata.normalize(t, s)
            elif t == "Strip":
                if op.get("strip_left", True):
                    while s and is_ws(s[0]):
                        s = s[1:]
                if op.get("strip_right", True):
                    while s and is_ws(s[-1]):
                        s = s[:-1]
            elif t == "StripAccents":
                s = "".join(c for c in s if not unicodedata.category(c).startswith("M"))
            elif t == "Replace":
                pat = op["pattern"]["String"]
                s = s.replace(pat, op["content"]) if pat else s
            elif t == "Prepend":
                s = op["prepend"] + s if s else s
            else:
                raise SystemExit("reference: normalizer %s not implemented" % t)
        return s


def char_split(s, pred, behavior):
    """NormalizedString.split with a char predicate: every matching char is its own delimiter."""
    segs = []  # (text, is_delim)
    for c in s:
        if pred(c):
            segs.append([c, True])
        elif segs and not segs[-1][1]:
            segs[-1][0] += c
        else:
            segs.append([c, False])
    if behavior == "Removed":
        return [t for t, d in segs if not d]
    if behavior == "Isolated":
        return [t for t, d in segs]
    if behavior == "Contiguous":
        out, prev = [], None
        for t, d in segs:
            if out and d == prev:
                out[-1] += t
            else:
                out.append(t)
            prev = d
        return out
    raise SystemExit("reference: behavior %s not implemented" % behavior)


class PreTokenizer:
    def __init__(self, j):
        self.ops = []
        self._parse(j)

    def _parse(self, j):
        if j is None:
            return
        if j["type"] == "Sequence":
            for k in j["pretokenizers"]:
                self._parse(k)
        else:
            self.ops.append(j)

    def __call__(self, s):
        pieces = [s]
        for op in self.ops:
            t, nxt = op["type"], []
            for p in pieces:
                if t == "Whitespace":
                    nxt += WS_RE.findall(p)
                elif t == "WhitespaceSplit":
                    nxt += char_split(p, is_ws, "Removed")
                elif t == "Punctuation":
                    nxt += char_split(p, is_punct, op.get("behavior", "Isolated"))
                elif t == "Digits":
                    nxt += char_split(p, lambda c: unicodedata.category(c) in ("Nd", "Nl", "No"),
                                      "Isolated" if op.get("individual_digits") else "Contiguous")
                else:
                    raise SystemExit("reference: pre_tokenizer %s not implemented" % t)
            pieces = [p for p in nxt if p]
        return pieces


class Bpe:
    def __init__(self, m):
        assert m.get("type", "BPE") == "BPE"
        self.vocab = m["vocab"]
        self.unk = m.get("unk_token")
        self.prefix = m.get("continuing_subword_prefix") or ""
        self.suffix = m.get("end_of_word_suffix") or ""
        self.fuse_unk = bool(m.get("fuse_unk"))
        self.byte_fallback = bool(m.get("byte_fallback"))
        self.ignore_merges = bool(m.get("ignore_merges"))
        self.ranks = {}
        for r, mg in enumerate(m.get("merges") or []):
            a, b = mg.split(" ") if isinstance(mg, str) else mg
            merged = a + (b[len(self.prefix):] if self.prefix and b.startswith(self.prefix) else b)
            self.ranks[(self.vocab[a], self.vocab[b])] = (r, self.vocab[merged])

    def __call__(self, word):
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        syms, unk_run = [], None
        for i, c in enumerate(word):
            s = (self.prefix if i > 0 else "") + c + (self.suffix if i == len(word) - 1 else "")
            if s in self.vocab:
                if unk_run is not None:
                    syms.append(unk_run)
                    unk_run = None
                syms.append(self.vocab[s])
                continue
            if self.byte_fallback:
                names = ["<0x%02X>" % b for b in s.encode("utf-8")]
                if all(n in self.vocab for n in names):
                    syms += [self.vocab[n] for n in names]
                    continue
            if self.unk is None:
                continue
            if unk_run is not None and not self.fuse_unk:
                syms.append(unk_run)
            unk_run = self.vocab[self.unk]
        if unk_run is not None:
            syms.append(unk_run)
        while True:
            best = None
            for k in range(len(syms) - 1):
                m = self.ranks.get((syms[k], syms[k + 1]))
                if m is not None and (best is None or m[0] < best[0]):
                    best = (m[0], k, m[1])
            if best is None:
                return syms
            _, k, new = best
            syms[k:k + 2] = [new]


class HfTokenizer:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        self.bpe = Bpe(j["model"])
        self.norm = Normalizer(j.get("normalizer"))
        self.pre = PreTokenizer(j.get("pre_tokenizer"))
        self.added = j.get("added_tokens") or []
        self.raw_tokens = [a for a in self.added if not a.get("normalized", not a.get("special", False))]
        self.norm_tokens = [dict(a, content=self.norm(a["content"])) for a in self.added
                            if a.get("normalized", not a.get("special", False))]
        self.before, self.after = [], []
        pp = j.get("post_processor")
        if pp is not None:
            assert pp["type"] == "TemplateProcessing", pp["type"]
            seen = False
            for item in pp["single"]:
                if "Sequence" in item:
                    seen = True
                    continue
                ids = pp["special_tokens"][item["SpecialToken"]["id"]]["ids"]
                (self.after if seen else self.before).extend(ids)
        self.trunc = (j.get("truncation") or {}).get("max_length")

    @staticmethod
    def split_added(s, tokens):
        out, start, i = [], 0, 0
        while i < len(s):
            best = None
            for t in tokens:
                c = t["content"]
                if c and s.startswith(c, i) and (best is None or len(c) > len(best["content"])):
                    best = t
            if best is None:
                i += 1
                continue
            b, e = i, i + len(best["content"])
            if best.get("single_word") and ((b > 0 and is_word(s[b - 1])) or (e < len(s) and is_word(s[e]))):
                i = e
                continue
            if best.get("lstrip"):
                while b > start and is_ws(s[b - 1]):
                    b -= 1
            if best.get("rstrip"):
                while e < len(s) and is_ws(s[e]):
                    e += 1
            if start < b:
                out.append((s[start:b], None))
            out.append((s[b:e], best["id"]))
            start = i = e
        if start < len(s):
            out.append((s[start:], None))
        return out

    def encode(self, s):
        pieces = []
        for text, tid in self.split_added(s, self.raw_tokens):
            if tid is not None:
                pieces.append((text, tid))
            else:
                pieces += self.split_added(self.norm(text), self.norm_tokens)
        ids = []
        for text, tid in pieces:
            if tid is not None:
                ids.append(tid)
            else:
                for w in self.pre(text):
                    ids += self.bpe(w)
        if self.trunc is not None:
            ids = ids[:max(0, self.trunc - len(self.before) - len(self.after))]
        return self.before + ids + self.after


def load_cangjie(path):
    word2cj, cj2word = {}, {}
    if path:
        with open(path, encoding="utf-8") as f:
            for entry in json.load(f):
                word, code = entry.split("\t")[:2]
                word2cj[word] = code
                cj2word.setdefault(code, []).append(word)
    return word2cj, cj2word


def cangjie(text, word2cj, cj2word):
    out = []
    for t in text:
        code = word2cj.get(t) if unicodedata.category(t) == "Lo" else None
        if code is None:
            out.append(t)
            continue
        k = cj2word[code].index(t)
        out.append("".join("[cj_%s]" % c for c in code + (str(k) if k > 0 else "")) + "[cj_.]")
    return "".join(out)


def korean(text):
    out = []
    for c in text:
        if "\uac00" <= c <= "\ud7af":
            s = ord(c) - 0xAC00
            out.append(chr(0x1100 + s // 588) + chr(0x1161 + (s % 588) // 28) + (chr(0x11A7 + s % 28) if s % 28 else ""))
        else:
            out.append(c)
    return "".join(out).strip()


def hiragana_normalize(t, segments):
    """Upstream's join of pykakasi segments, given the C++ side's KAKASI segments
    ([orig, reading, converted] over the NFC text); no segments: pass-through (no pykakasi)."""
    if segments is None:
        return unicodedata.normalize("NFKD", t)
    if "".join(s[0] for s in segments) != unicodedata.normalize("NFC", t):
        raise SystemExit("reference: ja segments %r do not spell the text %r" % (segments, t))
    out = []
    for orig, hira, converted in segments:
        if converted and hira and any(0x4E00 <= ord(c) <= 0x9FFF for c in orig):
            out.append((" " if hira[0] in ("は", "へ") else "") + hira)
        else:
            out.append(orig)
    return unicodedata.normalize("NFKD", "".join(out))


def prepare(case, cj):
    lang = case["lang"].lower()
    t = unicodedata.normalize("NFKD", case["text"].lower())
    if lang == "zh":
        seg = case["segmented"]
        if seg.replace(" ", "") != "".join(t.split()):
            raise SystemExit("reference: C++ segmentation %r is not the text %r with spaces" % (seg, t))
        t = cangjie(seg, *cj)
    elif lang == "ja":
        t = hiragana_normalize(t, case.get("ja_segments"))
    elif lang == "ko":
        t = korean(t)
    # he (dicta) and ru (stresser): upstream skips them when the packages are absent
    return ("[%s]" % lang + t).replace(" ", "[SPACE]")


def unicode_table(path):
    """Every code point assigned in this Python's Unicode: ranges of assigned code points, then one
    line per code point where str.lower or NFKD is not the identity, or that is a Rust \\w or
    \\s character: cp, lower, NFKD, flags (w = word, s = White_Space), tab-separated, escaped as
    JSON strings."""
    with open(path, "w", encoding="utf-8") as f:
        start = None
        for cp in range(0x110001):
            ok = cp <= 0x10FFFF and not (0xD800 <= cp <= 0xDFFF) and unicodedata.category(chr(cp)) != "Cn"
            if ok and start is None:
                start = cp
            elif not ok and start is not None:
                f.write("A\t%d\t%d\n" % (start, cp - 1))
                start = None
        for cp in range(0x110000):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            c = chr(cp)
            if unicodedata.category(c) == "Cn":
                continue
            lo, nf = c.lower(), unicodedata.normalize("NFKD", c)
            flags = ("w" if is_word(c) else "") + ("s" if is_ws(c) else "")
            if lo != c or nf != c or flags:
                f.write("%d\t%s\t%s\t%s\n" % (cp, json.dumps(lo), json.dumps(nf), flags))


def main():
    if sys.argv[1] == "--unicode-table":
        unicode_table(sys.argv[2])
        return
    with open(sys.argv[1], encoding="utf-8") as f:
        req = json.load(f)
    tok = HfTokenizer(req["tokenizer"])
    cj = load_cangjie(req.get("cangjie"))
    out = {"cases": [], "raw": []}
    for case in req.get("cases", []):
        p = prepare(case, cj)
        out["cases"].append({"prepared": p, "ids": tok.encode(p)})
    for s in req.get("raw", []):
        out["raw"].append(tok.encode(s))
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
