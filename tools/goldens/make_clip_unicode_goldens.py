"""CLIP tokenizer goldens for non-Latin text: transformers 5's CLIPTokenizer (the fast tokenizer: NFC, whitespace
runs to one space, Unicode lower case, CLIP's split pattern, byte-level BPE) on the tiny SD 1.5 vocabulary
(tests/data/tiny_sd/sd15/tokenizer, made by make_tiny_sd.py). Pairs of texts that differ only in case (Cyrillic,
Greek, Armenian, full-width Latin, Deseret) must give equal ids; CJK ideographs stay in one piece with their
neighbours (the old slow tokenizer split each ideograph off); decomposed accents compose (NFC).

The SD 2.1 tokenizer (pad token "!") is run too: its pad token is an added token of transformers 5, so every "!" of
a prompt is that token (id of "!"), not the BPE of "!" at a word end.

Writes tests/data/tiny_sd/tokenizer_unicode_goldens.json: {"transformers": version, "sd15": [{"text", "ids",
"padded"}], "sd21": [...]} (each case as in tokenizer_goldens.json).
Run: /tmp/sdgold/bin/python tools/goldens/make_clip_unicode_goldens.py
"""
import json
import os

import transformers
from transformers import CLIPTokenizer

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "tiny_sd")

TEXTS = [
    "ПРИВЕТ МИР, кошка на крыше",
    "привет мир, Кошка На Крыше",
    "ΚΑΛΗΜΕΡΑ ΣΟΦΙΑ ΟΔΟΣ",
    "καλημερα σοφια οδοσ",
    "ԲԱՐԵՎ Բարև",
    "ＦＵＬＬＷＩＤＴＨ ｆｕｌｌｗｉｄｔｈ",
    "İstanbul IŞIK ışık",
    "𐐀𐐁 𐐨𐐩",
    "東京タワーの夜景、富士山",
    "一只猫 在屋顶上 3只",
    "한국어 문장 ＡＢＣ",
    "cafe\u0301 nai\u0308ve re\u0301sume\u0301",
    "tabs\tand\u3000ideographic\u00a0spaces\u2028line",
    "control\x07bell and \ufffd replacement",
    "<|STARTOFTEXT|> upper specials <|endoftext|>",
    "emoji 🐝🏠 and ß ẞ Ǆǅǆ",
    "wow!! a horse! !x",
]


def cases(name):
    tok = CLIPTokenizer.from_pretrained(os.path.join(ROOT, name, "tokenizer"))
    out = [{"text": t, "ids": tok(t).input_ids,
            "padded": tok(t, padding="max_length", max_length=77, truncation=True).input_ids} for t in TEXTS]
    assert out[0]["ids"] == out[1]["ids"] and out[2]["ids"] == out[3]["ids"], "case pairs differ"
    return out


def main():
    assert int(transformers.__version__.split(".")[0]) >= 5, transformers.__version__
    with open(os.path.join(ROOT, "tokenizer_unicode_goldens.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "sd15": cases("sd15"), "sd21": cases("sd21")}, f,
                  ensure_ascii=False)


if __name__ == "__main__":
    main()
