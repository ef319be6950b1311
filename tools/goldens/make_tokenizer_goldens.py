#!/usr/bin/env python3
"""Golden token ids for tests/unit/test_tokenizer*.cpp, made with Hugging Face `tokenizers` (the peer).

For each model the script builds the HF tokenizer the way the model's own tokenizer.json is built (from the
vocabulary in a GGUF file), checks it against llama.cpp's vocab test pairs where they exist, and writes:

  tests/data/tokenizers/<name>.golden.json   {"cases": [{"text", "ids", "ids_plain"?, "decoded"}...]}
      ids:       encode(text, add_special_tokens=False) with special tokens parsed
      ids_plain: the same with special-token text treated as plain text (only for texts with specials)
      decoded:   decode(ids) (special tokens kept)
  tests/data/tokenizers/<name>/tokenizer.json (+ tokenizer_config.json)
      a *pruned* copy of the model's tokenizer: only the tokens and merges that the golden texts use, with the
      original ids kept (holes in between). BPE results are unchanged for those texts: a merge that is never
      applied is never the best candidate, so dropping it changes nothing; the script asserts that the pruned
      tokenizer gives the same ids as the full one for every text.

Models:
  smollm2    the default model (models/SmolLM2-135M-Instruct.Q4_1.gguf): byte-level BPE, individual digits
  llama-bpe  Llama 3 (llama.cpp's ggml-vocab-llama-bpe.gguf): Llama 3 regex, ignore_merges, BOS post-processor
  qwen2      Qwen2 (ggml-vocab-qwen2.gguf): NFC normalizer, Qwen2 regex
  llama-spm  Llama 2 (ggml-vocab-llama-spm.gguf): SentencePiece BPE with byte fallback, merges from scores
Also tests/data/tokenizers/unicode_norm.golden.json: NFC/NFD/NFKC/NFKD of 400 random strings (peer: Python's
unicodedata; --only-unicode writes just this file).
The llama.cpp vocab files come from the llama-cpp-python sdist:
  pip download --no-binary :all: --no-deps llama-cpp-python ; tar xzf llama_cpp_python-*.tar.gz
and ggml-vocab-llama-spm.gguf (with its .inp/.out pairs) is copied to tests/data/tokenizers/ as is.

Usage: python tools/goldens/make_tokenizer_goldens.py --vocab-dir <sdist>/vendor/llama.cpp/models
"""
import argparse
import json
import os
import random
import shutil
from collections import defaultdict

from gguf import GGUFReader
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "tokenizers")

GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


# ---------------------------------------------------------------------------------------------- test texts
def test_texts(specials):
    """At least 200 texts: code, whitespace runs, CJK, emoji, accents, numbers, special tokens, mixed."""
    t = [
        "", " ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\t\n", " \n ", "\r\n", "a", "A", "Hello world",
        " Hello world", "Hello World", " Hello World", " Hello World!", "Hello, world!", " this is 🦙.cpp",
        "w048 7tuijk dsdfhu", "нещо на Български", "ប្រសិនបើ ច្បាប់", "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)",
        "Hello", " Hello", "  Hello", "   Hello", "    Hello", "    Hello\n    Hello", " (", "\n =", "' era",
        "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～", "!!!!!!", "3", "33", "333", "3333", "33333",
        "333333", "3333333", "33333333", "333333333", "Cửa Việt", " discards", "ied 4 ½ months", "Äpfel",
        "The quick brown fox jumps over the lazy dog.", "THE QUICK BROWN FOX", "I'm", "I'M", "you're", "YOU'RE",
        "we've", "they'll", "she'd", "it's", "IT'S", "don't", "DON'T", "'s", "'S", "o'clock",
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
        "int main() {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
        "for (int i = 0; i < 10; ++i) { sum += a[i] * b[i]; }",
        "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
        "x = [1, 2, 3]\ny = {'a': 1, \"b\": 2}\nprint(x, y)",
        "#include <vector>\nstd::vector<int> v{1,2,3};", "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
        "const f = (a, b) => a ?? b;", "if (x != y && !z || w) {}", "a::b->c.d", "$HOME/.config/rbee/config.toml",
        "https://example.com/path?query=1&other=two#frag", "user@example.com", "C:\\Users\\me\\file.txt",
        "    indented", "\tindented with tab", "trailing spaces   ", "multiple   spaces   inside",
        "line1\nline2\r\nline3\rline4", "a\n\n\nb", " \n\n \n", "\u00a0non-breaking\u00a0space", "ideographic\u3000space",
        "em\u2003space", "zero\u200bwidth", "tab\t\tsep\tvalues", "   \t  \n  \t", "\v\f",
        "日本語のテキストです。", "中文测试：你好，世界！", "한국어 텍스트", "こんにちは世界", "我想在apple工作",
        "混合 English 和中文 text", "Ελληνικά κείμενο", "Русский текст с цифрами 123", "עברית", "العربية نص",
        "हिन्दी पाठ", "ภาษาไทย", "Tiếng Việt có dấu", "Ünïcödé àccénts ñ ç ø å", "naïve café résumé",
        "e\u0301", "cafe\u0301", "n\u0303", "A\u030a", "\u1100\u1161\u11a8", "ﬁ ligature", "①②③", "½ ¾ ⅞",
        "Ⅻ roman", "x² + y³", "µ micro", "Å angstrom", "ǅ titlecase", "ſ long s", "İstanbul", "ß straße",
        "😀", "😀😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇩🇪", "❤️", "🦙🦙🦙", "emoji in text 😂 here", "🤖: hello",
        "😀 😀  😀", "1️⃣", "🏳️‍🌈", "a😀b", "😀123", "$😀$",
        "0", "00", "007", "1234567890", "12,345.67", "3.14159", "-42", "+1e-10", "1/2", "2024-01-15",
        "12:30:45", "v1.2.3", "0x1F600", "#ff00aa", "100%", "€100", "$5.99", "1st 2nd 3rd 4th", "٣٤٥",
        "१२३", "１２３", "12 345 678", "9999999999999999999",
        "!@#$%^&*()", "...", "---", "___", "***", "~~~", "``` code ```", "\"quoted\"", "'single'", "«guillemets»",
        "„German“", "—em dash—", "…ellipsis", "¡Hola! ¿Qué tal?", "a,b;c:d", "(parens) [brackets] {braces}",
        "<tag>", "</tag>", "<|", "|>", "< |im_start| >",
    ]
    sp = specials
    im_start, im_end = sp.get("im_start"), sp.get("im_end")
    if im_start:
        t += [
            f"{im_start}user\nHello!{im_end}\n{im_start}assistant\n",
            f"{im_start}system\nYou are helpful.{im_end}",
            f"{im_start}{im_end}", f"{im_start}{im_start}", f" {im_start} ", f"text{im_end}text",
            f"{im_end}\n", f"{im_start[:-1]}", f"x{im_start[1:]}",
        ]
    for s in sp.get("others", []):
        t += [s, f"before {s} after", f"{s}{s}"]
    rng = random.Random(1234)
    alphabet = ["a", "b", "Z", " ", "  ", "\n", "1", "23", "é", "ü", "中", "文", "😀", "🦙", "'s", ".", ",", "-", "_",
                "(", ")", "\t", "ñ", "я", "ß", "٣", "e\u0301", "Hello", "world", "the", "ing", "tion"]
    while len(t) < 230:
        t.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 14))))
    # Deduplicate, keep order.
    seen, out = set(), []
    for s in t:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def read_llama_cpp_pairs(vocab_dir, name):
    """llama.cpp's <vocab>.gguf.inp / .out pairs: texts split by the marker line, one line of ids per text."""
    with open(os.path.join(vocab_dir, f"ggml-vocab-{name}.gguf.inp"), encoding="utf-8", newline="") as f:
        inp = f.read()
    with open(os.path.join(vocab_dir, f"ggml-vocab-{name}.gguf.out"), encoding="utf-8") as f:
        out = f.read()
    texts = inp.split("\n__ggml_vocab_test__\n")
    if texts and texts[-1] == "":
        texts = texts[:-1]
    ids = [[int(x) for x in line.split()] for line in out.split("\n")][: len(texts)]
    assert len(texts) == len(ids), (name, len(texts), len(ids))
    return list(zip(texts, ids))


# ---------------------------------------------------------------------------------------------- GGUF vocabularies
class GgufVocab:
    def __init__(self, path):
        r = GGUFReader(path)
        f = r.fields
        self.tokens = list(f["tokenizer.ggml.tokens"].contents())
        self.types = list(f["tokenizer.ggml.token_type"].contents())
        self.scores = list(f["tokenizer.ggml.scores"].contents()) if "tokenizer.ggml.scores" in f else None
        self.merges = list(f["tokenizer.ggml.merges"].contents()) if "tokenizer.ggml.merges" in f else None
        self.meta = {k: f[k].contents() for k in f if k.startswith("tokenizer.ggml.") and k not in (
            "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores", "tokenizer.ggml.merges")}

    def vocab(self):
        v = {}
        for i, t in enumerate(self.tokens):
            v.setdefault(t, i)
        return v

    def token(self, key):
        i = self.meta.get(f"tokenizer.ggml.{key}")
        return None if i is None else self.tokens[i]


def add_control_tokens(tok, gv):
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(gv.tokens, gv.types) if ty == 3])


def byte_level_tokenizer(gv, split=None, digits=False, ignore_merges=False, nfc=False, bos=None):
    merges = [tuple(m.split(" ", 1)) for m in gv.merges]
    tok = Tokenizer(models.BPE(gv.vocab(), merges, ignore_merges=ignore_merges))
    if nfc:
        tok.normalizer = normalizers.NFC()
    if split:
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    elif digits:
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    add_control_tokens(tok, gv)
    if bos:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, gv.vocab()[bos])])
    return tok


def merges_from_scores(gv):
    """SentencePiece BPE as merges: every split of a token into two tokens, best merged score first."""
    vocab = gv.vocab()
    merges = []
    for tok, i in vocab.items():
        if gv.types[i] != 1:
            continue
        local = []
        for k in range(1, len(tok)):
            left, right = tok[:k], tok[k:]
            if left in vocab and right in vocab and gv.types[vocab[left]] == 1 and gv.types[vocab[right]] == 1:
                local.append((vocab[left], vocab[right], left, right, gv.scores[i]))
        local.sort()
        merges.extend(local)
    merges.sort(key=lambda m: -m[4])
    return [(m[2], m[3]) for m in merges]


def spm_tokenizer(gv):
    tok = Tokenizer(models.BPE(gv.vocab(), merges_from_scores(gv), unk_token=gv.token("unknown_token_id"),
                               fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    add_control_tokens(tok, gv)
    tok.add_special_tokens([AddedToken(gv.token("unknown_token_id"), special=True, normalized=False)])
    bos = gv.token("bos_token_id")
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                       special_tokens=[(bos, gv.vocab()[bos])])
    return tok


# ---------------------------------------------------------------------------------------------- pruning
def prune(tok, texts, keep_ids):
    """A copy of `tok` with only the tokens/merges that `texts` need (original ids kept)."""
    j = json.loads(tok.to_str())
    model = j["model"]
    vocab = model["vocab"]
    id_to_tok = {i: t for t, i in vocab.items()}
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in model["merges"]]
    by_result = defaultdict(list)
    for k, (a, b) in enumerate(merges):
        by_result[a + b].append(k)
    def encodings(t, s):
        """Ids with special tokens parsed, then with their text as plain text."""
        a = t.encode(s, add_special_tokens=False).ids
        t.encode_special_tokens = True
        b = t.encode(s, add_special_tokens=False).ids
        t.encode_special_tokens = False
        return a, b

    # The highest id stays so the vocabulary keeps its size.
    used = set(keep_ids) | {max(vocab.values())}
    for s in texts:
        for ids in encodings(tok, s):
            used.update(ids)
    keep = {id_to_tok[i] for i in used if i in id_to_tok}
    stack, keep_merges = list(keep), set()
    while stack:
        t = stack.pop()
        for k in by_result.get(t, ()):
            if k in keep_merges:
                continue
            keep_merges.add(k)
            for part in merges[k]:
                if part not in keep:
                    keep.add(part)
                    stack.append(part)
    model["vocab"] = {t: vocab[t] for t in sorted(keep, key=lambda t: vocab[t])}
    model["merges"] = [list(merges[k]) for k in sorted(keep_merges)]
    pruned = Tokenizer.from_str(json.dumps(j, ensure_ascii=False))
    for s in texts:
        a, b = encodings(tok, s), encodings(pruned, s)
        assert a == b, ("pruned tokenizer differs", s, a, b)
    return j


def write_model(name, tok, texts, keep_ids, config, pairs=None):
    os.makedirs(os.path.join(OUT, name), exist_ok=True)
    pruned = prune(tok, texts, keep_ids)
    with open(os.path.join(OUT, name, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(pruned, f, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(OUT, name, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
    cases = []
    for s in texts:
        enc = tok.encode(s, add_special_tokens=False)
        case = {"text": s, "ids": enc.ids, "decoded": tok.decode(enc.ids, skip_special_tokens=False)}
        if any(a.content in s for a in tok.get_added_tokens_decoder().values()):
            tok.encode_special_tokens = True
            case["ids_plain"] = tok.encode(s, add_special_tokens=False).ids
            tok.encode_special_tokens = False
        cases.append(case)
    golden = {"source": f"HF tokenizers {__import__('tokenizers').__version__}; see tools/goldens/make_tokenizer_goldens.py",
              "cases": cases}
    if pairs is not None:
        golden["llama_cpp_pairs"] = [{"text": s, "ids": ids} for s, ids in pairs]
    with open(os.path.join(OUT, f"{name}.golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, separators=(",", ":"))
    print(f"{name}: {len(cases)} cases, pruned vocab {len(pruned['model']['vocab'])}, merges {len(pruned['model']['merges'])}")


def check_pairs(name, tok, pairs, add_special=False):
    bad = 0
    for s, ids in pairs:
        got = tok.encode(s, add_special_tokens=add_special).ids
        if got != ids:
            bad += 1
            print(f"  {name}: HF differs from llama.cpp on {s!r}: {got} vs {ids}")
    print(f"{name}: HF agrees with llama.cpp on {len(pairs) - bad}/{len(pairs)} test pairs")


def write_unicode_norm_goldens():
    """unicode_norm.golden.json: NFC/NFD/NFKC/NFKD of random strings (peer: Python's unicodedata)."""
    import unicodedata
    rng = random.Random(99)
    pool = [chr(c) for c in range(0x20, 0x7F)]
    pool += [chr(c) for c in range(0xC0, 0x180)]          # Latin-1 and Latin Extended-A (precomposed)
    pool += [chr(c) for c in range(0x300, 0x370)] * 3     # combining diacritics, in every order
    pool += [chr(c) for c in range(0x1E00, 0x1F00)]       # Latin Extended Additional (Vietnamese)
    pool += [chr(c) for c in range(0x1F00, 0x2000)]       # Greek Extended
    pool += [chr(c) for c in range(0x1100, 0x1200)]       # Hangul jamo
    pool += [chr(c) for c in range(0xAC00, 0xAC00 + 400)]  # Hangul syllables
    pool += list("ﬁﬂ①②½¾²³ｱｲ１２ＡＢ™ℌℍ㍿㎏ǅǆÅΩKﬀ\u0958\u0959\u09cb\u0f73\u0f75\u0344\u0340\u0341")
    pool += [chr(c) for c in (0x05B0, 0x05B8, 0x0591, 0x0653, 0x0654, 0x0655, 0x093C, 0x0CD5, 0x0CD6, 0x1D165)]
    cases = []
    for _ in range(400):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(1, 12)))
        cases.append({"text": text, **{f: unicodedata.normalize(f, text) for f in ("NFC", "NFD", "NFKC", "NFKD")}})
    with open(os.path.join(OUT, "unicode_norm.golden.json"), "w", encoding="utf-8") as f:
        json.dump({"unicode": unicodedata.unidata_version, "cases": cases}, f, ensure_ascii=False,
                  separators=(",", ":"))
    print(f"unicode_norm: {len(cases)} cases (Unicode {unicodedata.unidata_version})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--vocab-dir", help="llama.cpp's models/ folder (ggml-vocab-*.gguf)")
    ap.add_argument("--only-unicode", action="store_true", help="only write unicode_norm.golden.json")
    args = ap.parse_args()
    write_unicode_norm_goldens()
    if args.only_unicode:
        return

    # SmolLM2 (the default model).
    gv = GgufVocab(args.model)
    tok = byte_level_tokenizer(gv, digits=True)
    byte_chars = [i for i, t in enumerate(gv.tokens) if len(t) == 1]
    specials = {"im_start": "<|im_start|>", "im_end": "<|im_end|>", "others": ["<|endoftext|>", "<file_sep>"]}
    texts = test_texts(specials)
    control = [i for i, ty in enumerate(gv.types) if ty == 3]
    config = {"bos_token": gv.token("bos_token_id"), "eos_token": gv.token("eos_token_id"),
              "pad_token": gv.token("padding_token_id"), "unk_token": gv.token("unknown_token_id"),
              "add_bos_token": False, "add_eos_token": False}
    write_model("smollm2", tok, texts, byte_chars + control, config)

    # Llama 3.
    gv = GgufVocab(os.path.join(args.vocab_dir, "ggml-vocab-llama-bpe.gguf"))
    bos = gv.token("bos_token_id")
    tok = byte_level_tokenizer(gv, split=LLAMA3_SPLIT, ignore_merges=True, bos=bos)
    pairs = read_llama_cpp_pairs(args.vocab_dir, "llama-bpe")
    check_pairs("llama-bpe", tok, pairs)
    texts = test_texts({"others": ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>"]}) + [s for s, _ in pairs]
    byte_chars = [gv.vocab()[c] for c in map(chr, range(0x21, 0x7F))] + [i for i, t in enumerate(gv.tokens) if len(t) == 1]
    control = [i for i, ty in enumerate(gv.types) if ty == 3 and gv.tokens[i] in (
        "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>")]
    # Only the named control tokens are kept (the 250 reserved ones would bloat the file).
    tok = byte_level_tokenizer_subset_controls(gv, LLAMA3_SPLIT, bos, control)
    config = {"bos_token": bos, "eos_token": gv.token("eos_token_id"), "add_bos_token": True}
    write_model("llama-bpe", tok, texts, byte_chars + control, config, pairs)

    # Qwen2.
    gv = GgufVocab(os.path.join(args.vocab_dir, "ggml-vocab-qwen2.gguf"))
    tok = byte_level_tokenizer(gv, split=QWEN2_SPLIT, nfc=True)
    pairs = read_llama_cpp_pairs(args.vocab_dir, "qwen2")
    check_pairs("qwen2", tok, pairs)
    texts = test_texts({"im_start": "<|im_start|>", "im_end": "<|im_end|>", "others": ["<|endoftext|>"]}) + [
        s for s, _ in pairs]
    byte_chars = [i for i, t in enumerate(gv.tokens) if len(t) == 1]
    control = [i for i, ty in enumerate(gv.types) if ty == 3]
    config = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "add_bos_token": False}
    write_model("qwen2", tok, texts, byte_chars + control, config, pairs)

    # Llama 2 (SentencePiece): the GGUF vocabulary is small enough to keep whole, with llama.cpp's pairs.
    gv = GgufVocab(os.path.join(args.vocab_dir, "ggml-vocab-llama-spm.gguf"))
    tok = spm_tokenizer(gv)
    pairs = read_llama_cpp_pairs(args.vocab_dir, "llama-spm")
    check_pairs("llama-spm", tok, pairs)
    texts = test_texts({"others": ["<s>", "</s>"]}) + [s for s, _ in pairs]
    byte_tokens = [i for i, ty in enumerate(gv.types) if ty in (2, 3, 6)]
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
              "add_eos_token": False}
    write_model("llama-spm", tok, texts, byte_tokens, config, pairs)
    shutil.copy(os.path.join(args.vocab_dir, "ggml-vocab-llama-spm.gguf"), os.path.join(OUT, "ggml-vocab-llama-spm.gguf"))


def byte_level_tokenizer_subset_controls(gv, split, bos, control_ids):
    merges = [tuple(m.split(" ", 1)) for m in gv.merges]
    tok = Tokenizer(models.BPE(gv.vocab(), merges, ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(gv.tokens[i], special=True, normalized=False) for i in control_ids])
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                       special_tokens=[(bos, gv.vocab()[bos])])
    return tok


if __name__ == "__main__":
    main()
