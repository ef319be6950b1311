#!/usr/bin/env python3
"""The peer of bench/bench_tokenizer.cpp: HF tokenizers encoding and decoding the same ~1 MB text with the same
tokenizers (built as tools/goldens/make_tokenizer_goldens.py builds them). Reports CPU time per pass (the
machine may be shared, so compare with the C++ benchmark's CPU column from the same run).

Usage: python tools/bench_tokenizer_peer.py   (after scripts/setup.sh --goldens)
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "goldens"))
import make_tokenizer_goldens as g  # noqa: E402

ROOT = g.ROOT


def corpus():
    with open(os.path.join(ROOT, "tests", "data", "tokenizers", "smollm2.golden.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    one = "".join(c["text"] + "\n" for c in cases if "<|" not in c["text"] and "<file_sep>" not in c["text"])
    text = ""
    while len(text.encode("utf-8")) < (1 << 20):
        text += one
    return text


def bench(name, tok, text, reps=5):
    best_enc = best_dec = float("inf")
    ids = None
    for _ in range(reps):
        t0 = time.process_time()
        ids = tok.encode(text, add_special_tokens=False).ids
        t1 = time.process_time()
        tok.decode(ids, skip_special_tokens=False)
        t2 = time.process_time()
        best_enc, best_dec = min(best_enc, t1 - t0), min(best_dec, t2 - t1)
    mb = len(text.encode("utf-8")) / 1e6
    print(f"{name}: encode {best_enc * 1e3:.0f} ms CPU ({mb / best_enc:.2f} MB/s, {len(ids)} tokens), "
          f"decode {best_dec * 1e3:.1f} ms CPU ({mb / best_dec:.1f} MB/s)")


def main():
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    text = corpus()
    smol = g.GgufVocab(os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    bench("smollm2-bpe (HF tokenizers)", g.byte_level_tokenizer(smol, digits=True), text)
    spm = g.GgufVocab(os.path.join(ROOT, "tests", "data", "tokenizers", "ggml-vocab-llama-spm.gguf"))
    bench("llama2-spm (HF tokenizers BPE)", g.spm_tokenizer(spm), text)


if __name__ == "__main__":
    main()
