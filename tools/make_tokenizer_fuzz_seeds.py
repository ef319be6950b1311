#!/usr/bin/env python3
"""Seed corpus for fuzz/fuzz_tokenizer.cpp (fuzz/corpus/tokenizer/). The first byte of a seed is the mode:
0 text, 1 little-endian u16 ids, 2 tokenizer.json text, 3 GGUF bytes (made with gguf-py's GGUFWriter).

Usage: python tools/make_tokenizer_fuzz_seeds.py
"""
import json
import os
import struct
import tempfile

from gguf import GGUFWriter, TokenType

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus", "tokenizer")


def write(name, mode, payload):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes([mode]) + payload)


def tiny_gguf(model, tokens, types, merges=None, scores=None, pre=None):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.gguf")
        w = GGUFWriter(path, "llama")
        w.add_tokenizer_model(model)
        if pre:
            w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types(types)
        if scores:
            w.add_token_scores(scores)
        if merges:
            w.add_token_merges(merges)
        w.add_bos_token_id(0)
        w.add_eos_token_id(1)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        with open(path, "rb") as f:
            return f.read()


def main():
    os.makedirs(OUT, exist_ok=True)
    write("text-plain", 0, "Hello world, it's 2024!".encode())
    write("text-mixed", 0, "<|im_start|>user\n  café 🦙 我想 123\t<|im_end|>\n".encode())
    write("text-invalid", 0, b"ok \xff \xc3 \xed\xa0\x80 end")
    write("ids-emoji", 1, struct.pack("<6H", 29871, 243, 162, 169, 156, 2))
    minimal = {"added_tokens": [{"id": 3, "content": "<s>", "special": True}],
               "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Prepend", "prepend": "▁"}]},
               "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                   {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "Isolated", "invert": False},
                   {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True}]},
               "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                                                            {"type": "ByteFallback"}, {"type": "Fuse"},
                                                            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
               "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                           {"Sequence": {"id": "A", "type_id": 0}}],
                                  "special_tokens": {"<s>": {"id": "<s>", "ids": [3], "tokens": ["<s>"]}}},
               "model": {"type": "BPE", "byte_fallback": True, "vocab": {"a": 0, "b": 1, "ab": 2, "▁": 4, "<0x41>": 5},
                         "merges": ["a b"]}}
    write("json-spm-style", 2, json.dumps(minimal, ensure_ascii=False).encode())
    bytelevel = {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
                 "decoder": {"type": "ByteLevel"},
                 "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3}, "merges": [["a", "b"]]}}
    write("json-byte-level", 2, json.dumps(bytelevel).encode())
    write("gguf-gpt2", 3, tiny_gguf("gpt2", ["<s>", "</s>", "a", "b", "ab", "Ġ", "Ġab"],
                                    [TokenType.CONTROL, TokenType.CONTROL] + [TokenType.NORMAL] * 5,
                                    merges=["a b", "Ġ ab"], pre="llama-bpe"))
    write("gguf-llama", 3, tiny_gguf("llama", ["<s>", "</s>", "<unk>", "▁", "a", "b", "▁a", "<0xC3>"],
                                     [TokenType.CONTROL, TokenType.CONTROL, TokenType.UNKNOWN, TokenType.NORMAL,
                                      TokenType.NORMAL, TokenType.NORMAL, TokenType.NORMAL, TokenType.BYTE],
                                     scores=[0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -0.5, 0.0]))
    print("seeds in", OUT, sorted(os.listdir(OUT)))


if __name__ == "__main__":
    main()
