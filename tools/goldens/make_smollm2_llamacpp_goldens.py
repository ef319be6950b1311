#!/usr/bin/env python3
"""Goldens for the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) from llama.cpp, through llama-cpp-python.

llama.cpp is the independent peer: it reads the same GGUF file, tokenizes with its own tokenizer and runs its
own Q4_1 kernels. For every prompt below the golden holds:

  - the prompt ids llama.cpp made (tokenize(text, add_bos = the file's add_bos_token, special = chat));
  - logits of the first 32 positions (logits_all=True, one batch): per position the top-40 token ids with
    their logits, plus the logits of 200 fixed random token ids (the same ids for every position);
  - the greedy continuation (argmax, temperature 0) of 64 tokens after the whole prompt, decoded one token
    per llama_decode call as a chat client would.

Files (tests/data/goldens/smollm2_llamacpp/):
  golden.json   prompts, flags, ids, continuation ids, the random id set, and for each prompt the offset of
                its logits in logits.f32
  logits.f32    little-endian float32; per prompt [32 positions][40 top + 200 random] values; the ids of the
                top-40 entries are in golden.json (top_ids[prompt][position][40]).

Build the peer from source (compiles llama.cpp; CPU only):
  pip download --no-binary :all: --no-deps llama-cpp-python        (0.3.36 was used)
  cmake -S <sdist>/vendor/llama.cpp -B <build> -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DGGML_NATIVE=ON
  cmake --build <build> --target llama llama-bench
  CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" pip install --no-build-isolation <sdist>
  LLAMA_CPP_LIB_PATH=<build>/bin tools/goldens/make_smollm2_llamacpp_goldens.py
(or plainly `pip install llama-cpp-python --no-binary llama-cpp-python`, which compiles the same sources.)
"""
import json
import os
import sys

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT_DIR = os.path.join(ROOT, "tests", "data", "goldens", "smollm2_llamacpp")

POSITIONS = 32
TOP_K = 40
RANDOM_IDS = 200
CONTINUATION = 64
SEED = 20240611

# Every prompt is at least POSITIONS tokens long. "chat": rendered with the file's chat template and tokenized
# with special tokens parsed.
PROMPTS = [
    {"name": "english", "chat": False,
     "text": "The capital of France is Paris, a city known for its museums, its cafes and the river that runs "
             "through it. Every year millions of visitors walk along its bridges. The capital of Italy is"},
    {"name": "code", "chat": False,
     "text": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number, computed iteratively.\"\"\"\n"
             "    a, b = 0, 1\n    for _ in range(n):\n"},
    {"name": "chat", "chat": True,
     "messages": [{"role": "system", "content": "You are a concise assistant that answers in one sentence."},
                  {"role": "user", "content": "Why is the sky blue during the day but red at sunset?"}]},
    {"name": "numbers", "chat": False,
     "text": "1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987,"},
    {"name": "non_english", "chat": False,
     "text": "Der schnelle braune Fuchs springt über den faulen Hund. Le renard brun rapide saute par-dessus "
             "le chien paresseux. 東京は日本の首都で、"},
]


def render_chat(template: str, messages, bos: str, eos: str) -> str:
    import jinja2
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=True, bos_token=bos,
                                            eos_token=eos)


def main() -> int:
    from llama_cpp import Llama, llama_cpp

    # KV cache in f32 (GGML_TYPE_F32 = 0): with the default f16 cache llama.cpp's CPU attention rounds q, the
    # probabilities and its V accumulator to f16, and that rounding, amplified through 30 layers of 8-bit
    # activation quantization, moves logits by ~0.2 and greedy choices within a few tokens. With f32 K/V both
    # engines do attention in f32 and the comparison isolates the model code.
    llm = Llama(model_path=MODEL, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2, logits_all=True,
                verbose=False, seed=0, type_k=0, type_v=0)
    meta = llm.metadata
    vocab = llm.n_vocab()
    add_bos = meta.get("tokenizer.ggml.add_bos_token", "false") == "true"
    rng = np.random.default_rng(SEED)
    random_ids = sorted(int(i) for i in rng.choice(vocab, size=RANDOM_IDS, replace=False))

    out = {"model": os.path.basename(MODEL), "peer": f"llama-cpp-python {llama_cpp.__version__ if hasattr(llama_cpp, '__version__') else ''}".strip(),
           "positions": POSITIONS, "top_k": TOP_K, "continuation": CONTINUATION, "random_ids": random_ids,
           "add_bos": add_bos, "kv_cache": "f32", "prompts": []}
    blobs = []
    offset = 0
    for p in PROMPTS:
        if p["chat"]:
            tmpl = meta["tokenizer.chat_template"]
            bos = llm.detokenize([llm.token_bos()]).decode() if llm.token_bos() >= 0 else ""
            eos = llm.detokenize([llm.token_eos()], special=True).decode()
            text = render_chat(tmpl, p["messages"], bos, eos)
        else:
            text = p["text"]
        ids = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=p["chat"])
        assert len(ids) >= POSITIONS, f"prompt {p['name']} has only {len(ids)} tokens"

        # Logits of every prompt position, one batch.
        llm.reset()
        llm.eval(ids)
        scores = np.array(llm.scores[:len(ids)], dtype=np.float32)  # [n, vocab]
        top_ids, rows = [], []
        for pos in range(POSITIONS):
            row = scores[pos]
            top = np.argsort(-row, kind="stable")[:TOP_K]
            top_ids.append([int(t) for t in top])
            rows.append(np.concatenate([row[top], row[random_ids]]).astype(np.float32))
        blob = np.stack(rows).astype("<f4")
        blobs.append(blob)

        # Greedy continuation: prompt again from scratch, then one token per decode call.
        llm.reset()
        llm.eval(ids)
        cont = []
        last = np.array(llm.scores[len(ids) - 1], dtype=np.float32)
        for _ in range(CONTINUATION):
            nxt = int(np.argmax(last))
            cont.append(nxt)
            llm.eval([nxt])
            last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)

        entry = {"name": p["name"], "chat": p["chat"], "text": text, "ids": [int(i) for i in ids],
                 "top_ids": top_ids, "logits_offset": offset, "continuation_ids": cont,
                 "continuation_text": llm.detokenize(cont).decode("utf-8", errors="replace")}
        offset += blob.size
        out["prompts"].append(entry)
        print(f"{p['name']}: {len(ids)} prompt tokens -> {entry['continuation_text']!r}")

    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    np.concatenate([b.reshape(-1) for b in blobs]).astype("<f4").tofile(os.path.join(OUT_DIR, "logits.f32"))
    print(f"wrote {OUT_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
