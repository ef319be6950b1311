#!/usr/bin/env python3
"""Tiny random-weight models of every supported architecture, with Hugging Face transformers logits as goldens.

For each family (llama, mistral, qwen2, phi3, gemma, gemma2, gemma3) the config below is that family's real
Hugging Face config (the values named in the comments) with the sizes cut down: hidden 48, a few layers,
vocabulary 320, short context. Every setting that makes the family different is kept, and where a setting
only shows at long range it is shrunk so that it acts inside the 40-token test sequence (sliding windows of
8-16 positions; Llama 3.1's original context shrunk so that its frequency bands all fall inside a 16-dim head).

Weights are random with a fixed seed, drawn at scales that make the family's features matter: the script
re-runs transformers with each feature switched off (no window, no soft-cap, no rope scaling, no q/k bias,
global rope base on local layers) and refuses to write the golden if the logits do not move, so a test that
ignored the feature would fail.

Written per architecture to tests/data/tiny_models/<arch>/:
  config.json           Hugging Face config (llama, mistral, phi3, gemma, gemma2 in the hub's transformers 4
                        layout: rope_theta / rope_scaling; qwen2 and gemma3 as transformers 5 saves them:
                        rope_parameters), so the loader is tested on both layouts
  model.safetensors     f32 weights as transformers saves them
  tokenizer.json, tokenizer_config.json
                        a 320-piece SentencePiece BPE tokenizer (byte fallback) trained here on seeded text;
                        tests feed token ids, the tokenizer only has to load
  model.gguf            the same weights in f32, converted with llama.cpp's convert_hf_to_gguf.py
  golden.json           the token ids, the logits' shape, and the transformers/torch versions
  logits.f32            transformers' f32 logits [T, vocab] (eager attention), little-endian
  logits_gguf.f32       only where the GGUF cannot hold a setting (Mistral: llama.cpp's converter writes no
                        sliding window for MistralForCausalLM): transformers' logits with that setting off

Usage: LLAMA_CPP_DIR=<llama-cpp-python sdist>/vendor/llama.cpp tools/goldens/make_tiny_models.py [arch...]
Needs torch, transformers, sentencepiece, safetensors (tools/requirements-goldens.txt).
"""
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT_ROOT = os.path.join(ROOT, "tests", "data", "tiny_models")
SEQ_LEN = 40
VOCAB = 320
SEED = 1234

# Real configs, sizes cut down. Each comment names the model whose config.json the values come from.
CONFIGS = {
    # meta-llama/Llama-3.1-8B: GQA 32/8, rope_theta 500000, llama3 rope scaling (factor 8, low 1, high 4,
    # original 8192), rms eps 1e-5, untied. Original context cut to 256 so that a 16-dim head has frequencies
    # below, inside and above the smoothing band.
    "llama": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": VOCAB, "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu",
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 256, "rope_type": "llama3"},
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
        "bos_token_id": 1, "eos_token_id": 2, "head_dim": 16,
    },
    # mistralai/Mistral-7B-v0.1: GQA 32/8, sliding_window 4096 (cut to 8), rope_theta 10000, rms eps 1e-5.
    "mistral": {
        "architectures": ["MistralForCausalLM"], "model_type": "mistral",
        "vocab_size": VOCAB, "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu",
        "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "sliding_window": 8,
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
    },
    # Qwen/Qwen2.5-0.5B: q/k/v biases, rope_theta 1e6, rms eps 1e-6, tied embeddings, GQA 14/2, no window.
    "qwen2": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "vocab_size": VOCAB, "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu",
        "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "use_sliding_window": False, "sliding_window": 512, "max_window_layers": 2,
        "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
    },
    # microsoft/Phi-3-mini-4k-instruct: fused qkv_proj and gate_up_proj, sliding_window 2047 (cut to 16),
    # rope_theta 10000, original_max_position_embeddings = max_position_embeddings, MHA, untied.
    "phi3": {
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
        "vocab_size": VOCAB, "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 4, "hidden_act": "silu",
        "max_position_embeddings": 512, "original_max_position_embeddings": 512, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "rope_scaling": None, "sliding_window": 16, "tie_word_embeddings": False,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0,
    },
    # google/gemma-7b: head_dim 256 decoupled from hidden/heads (16 x 256 = 4096 != 3072), GeGLU (tanh),
    # embeddings scaled by sqrt(hidden), (1 + w) norms, tied, rms eps 1e-6. Here 4 heads x 32 != 48.
    "gemma": {
        "architectures": ["GemmaForCausalLM"], "model_type": "gemma",
        "vocab_size": VOCAB, "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32,
        "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "tie_word_embeddings": True, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
    },
    # google/gemma-2-2b: sandwich norms, attn softcap 50, final softcap 30, query_pre_attn_scalar = head_dim,
    # sliding window 4096 (cut to 8) on even layers, GQA 8/4, head_dim 256 (16 here).
    "gemma2": {
        "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
        "vocab_size": VOCAB, "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "query_pre_attn_scalar": 16, "sliding_window": 8, "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0, "tie_word_embeddings": True,
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
    },
    # google/gemma-3-4b-it (text config): q/k RMS norms, five sliding layers then one global (pattern 6),
    # local rope base 10000, global rope base 1e6 with linear scaling x8, window 1024 (cut to 8),
    # query_pre_attn_scalar = head_dim, no soft-capping, GQA 8/4.
    "gemma3": {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "vocab_size": VOCAB, "hidden_size": 48, "intermediate_size": 64, "num_hidden_layers": 6,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "query_pre_attn_scalar": 16, "sliding_window": 8, "sliding_window_pattern": 6,
        "attn_logit_softcapping": None, "final_logit_softcapping": None, "tie_word_embeddings": True,
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
    },
}
# These two are written as transformers 5 saves them (rope_parameters), the rest in the hub's layout.
SAVE_AS_TRANSFORMERS5 = {"qwen2", "gemma3"}

WORDS = ("the of and to in is was that for on as with by he at from his an were are which this be or has had "
         "not but one all their there been if more when will would who so no out up into do only new some could "
         "time these two may then first any my now such like our over man me even most made after also did many "
         "before must through back years where much your way well down should because each just those people how "
         "too little state good very make world still own see men work long get here between both life being under "
         "never day same another know while last might us great old year off come since against go came right used "
         "take three river city number water sunset museum garden language window morning question answer").split()


def spm_to_tokenizer_json(model_file: str, out_path: str) -> None:
    """tokenizer.json for a SentencePiece BPE model: its pieces as the vocabulary, merges recovered from the
    pieces (each multi-character piece splits into the two pieces that merged into it, the earliest pair
    first), Metaspace pre-tokenization with a dummy prefix, byte fallback."""
    import sentencepiece as spm
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    sp = spm.SentencePieceProcessor(model_file=model_file)
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    merges = []
    for piece, pid in sorted(vocab.items(), key=lambda kv: kv[1]):
        if sp.is_control(pid) or sp.is_unknown(pid) or sp.is_byte(pid) or len(piece) < 2:
            continue
        splits = [(max(vocab[piece[:i]], vocab[piece[i:]]), piece[:i], piece[i:]) for i in range(1, len(piece))
                  if piece[:i] in vocab and piece[i:] in vocab]
        if splits:
            _, a, b = min(splits)
            merges.append((pid, a, b))
    merges = [(a, b) for _, a, b in sorted(merges)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(sp.id_to_piece(i), special=True, normalized=False)
                            for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)])
    tok.save(out_path)


def train_tokenizer(dirpath: str) -> None:
    """A 320-piece SentencePiece BPE model with byte fallback, and its tokenizer.json."""
    import sentencepiece as spm
    rng = np.random.default_rng(SEED)
    lines = [" ".join(rng.choice(WORDS, size=12)) + (" 1234567890." if i % 7 == 0 else ".") for i in range(4000)]
    corpus = os.path.join(dirpath, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=os.path.join(dirpath, "tokenizer"), vocab_size=VOCAB, model_type="bpe",
        byte_fallback=True, character_coverage=1.0, normalization_rule_name="identity",
        add_dummy_prefix=True, remove_extra_whitespaces=False, unk_id=0, eos_id=1, bos_id=2, pad_id=-1,
        num_threads=1, minloglevel=2, seed_sentencepiece_size=100000, shuffle_input_sentence=False)
    spm_to_tokenizer_json(os.path.join(dirpath, "tokenizer.model"), os.path.join(dirpath, "tokenizer.json"))


def init_weights(model, arch: str, seed: int) -> None:
    """Random weights at scales that keep activations O(1) and make each family's features visible."""
    import torch
    g = torch.Generator().manual_seed(seed)
    gemma = arch.startswith("gemma")
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.ndim == 1:
                if "norm" in name:
                    # Gemma stores w with the norm multiplying by (1 + w); others multiply by w.
                    base = 0.0 if gemma else 1.0
                    p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))
                else:  # biases
                    p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                scale = 1.0 / np.sqrt(p.shape[1])
                if arch == "gemma2" and ("q_proj" in name or "k_proj" in name):
                    scale *= 4.0  # attention scores reach the soft-cap's bend (cap 50)
                p.copy_(scale * torch.randn(p.shape, generator=g))


def hf_logits(model_dir: str, ids, overrides=None):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.from_pretrained(model_dir)
    for k, v in (overrides or {}).items():
        setattr(cfg, k, v)
    model = AutoModelForCausalLM.from_pretrained(model_dir, config=cfg, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        out = model(torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0].float().numpy()


# Settings switched off to show that each distinctive feature changes the logits: (overrides, what it shows).
def feature_checks(arch: str, cfg: dict):
    checks = []
    if arch == "llama":
        checks.append(({"rope_scaling": None, "rope_parameters": {"rope_type": "default",
                                                                   "rope_theta": cfg["rope_theta"]}},
                       "llama3 rope scaling"))
    if arch in ("mistral", "phi3"):
        checks.append(({"sliding_window": None}, "sliding window"))
    if arch == "gemma2":
        checks.append(({"sliding_window": 4096}, "sliding window"))
        checks.append(({"attn_logit_softcapping": None}, "attention soft-cap"))
        checks.append(({"final_logit_softcapping": None}, "final soft-cap"))
    if arch == "gemma3":
        checks.append(({"sliding_window": 4096}, "sliding window"))
    return checks


def write_config(model_dir: str, arch: str, cfg: dict) -> None:
    if arch in SAVE_AS_TRANSFORMERS5:
        return  # keep what save_pretrained wrote
    out = dict(cfg)
    out["torch_dtype"] = "float32"
    with open(os.path.join(model_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=2)
        f.write("\n")


def build(arch: str, tok_dir: str, llama_cpp_dir: str) -> None:
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = CONFIGS[arch]
    out_dir = os.path.join(OUT_ROOT, arch)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f)
        config = AutoConfig.from_pretrained(tmp)
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
    init_weights(model, arch, SEED + sum(map(ord, arch)))
    model.save_pretrained(out_dir, safe_serialization=True)
    write_config(out_dir, arch, cfg)
    for extra in ("generation_config.json",):
        p = os.path.join(out_dir, extra)
        if os.path.exists(p):
            os.remove(p)
    shutil.copy(os.path.join(tok_dir, "tokenizer.json"), out_dir)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False}, f, indent=2)
        f.write("\n")

    rng = np.random.default_rng(SEED)
    ids = [int(cfg["bos_token_id"])] + [int(i) for i in rng.integers(3, VOCAB, size=SEQ_LEN - 1)]
    logits = hf_logits(out_dir, ids)
    assert np.isfinite(logits).all()
    print(f"{arch}: logits std {logits.std():.3f}, max |l| {np.abs(logits).max():.3f}")
    for overrides, what in feature_checks(arch, cfg):
        other = hf_logits(out_dir, ids, overrides)
        rel = np.abs(other - logits).max() / np.abs(logits).max()
        print(f"  without {what}: max change {rel:.3g} of max |logit|")
        assert rel > 1e-2, f"{arch}: {what} does not change the logits enough to be tested"

    # GGUF through llama.cpp's converter (the tokenizer.model it needs is removed afterwards: the loader
    # reads tokenizer.json, and the GGUF carries its own vocabulary).
    shutil.copy(os.path.join(tok_dir, "tokenizer.model"), out_dir)
    gguf_path = os.path.join(out_dir, "model.gguf")
    subprocess.run([sys.executable, os.path.join(llama_cpp_dir, "convert_hf_to_gguf.py"), out_dir,
                    "--outtype", "f32", "--outfile", gguf_path], check=True, stdout=subprocess.DEVNULL)
    os.remove(os.path.join(out_dir, "tokenizer.model"))

    golden = {"arch": arch, "ids": ids, "shape": list(logits.shape), "transformers": transformers.__version__,
              "torch": torch.__version__, "logits": "logits.f32"}
    logits.astype("<f4").tofile(os.path.join(out_dir, "logits.f32"))
    if arch == "mistral":
        # llama.cpp's converter maps MistralForCausalLM to its llama architecture and writes no window.
        nowin = hf_logits(out_dir, ids, {"sliding_window": None})
        nowin.astype("<f4").tofile(os.path.join(out_dir, "logits_gguf.f32"))
        golden["logits_gguf"] = "logits_gguf.f32"
    with open(os.path.join(out_dir, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")


def main() -> int:
    llama_cpp_dir = os.environ.get("LLAMA_CPP_DIR")
    if not llama_cpp_dir or not os.path.exists(os.path.join(llama_cpp_dir, "convert_hf_to_gguf.py")):
        print("set LLAMA_CPP_DIR to the llama.cpp source tree (vendor/llama.cpp of the llama-cpp-python sdist)")
        return 2
    archs = sys.argv[1:] or list(CONFIGS)
    with tempfile.TemporaryDirectory() as tok_dir:
        train_tokenizer(tok_dir)
        for arch in archs:
            build(arch, tok_dir, llama_cpp_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
