#!/usr/bin/env python3
"""rbee vs llama.cpp on the same model, machine and thread count, in the same run: prompt processing (ppN) and
decode (tgN) tokens/s from `rbee bench --json` and `llama-bench -o json`, and the ratios rbee / llama.cpp.

The two engines run alternately for several rounds (rbee, llama.cpp, rbee, llama.cpp, ...) so that a change in
the machine's load hits both; each round is a full bench run of each (one warm-up, then -r timed repetitions).
All timed samples of all rounds are pooled per engine and test.

llama.cpp runs either as llama-bench (--llama-bench PATH; built from the llama.cpp sources inside the
llama-cpp-python sdist, vendor/llama.cpp:
  cmake -S <sdist>/vendor/llama.cpp -B build-llama -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON
  cmake --build build-llama --target llama-bench)
or, without --llama-bench, through llama-cpp-python's bundled libllama, timed here the way llama-bench times:
ppN = one llama_decode of N random tokens into an empty cache (logits of the last token only), tgN = N decode
calls of one random token each; one warm-up run, then -r timed ones. Per decode call this adds llama-cpp-python's
Python overhead (~0.1 ms: batch setup, copying one logit row), small against a decode step of a 135M model.

Models: --model PATH (repeatable). Without it, the default set: SmolLM2-135M-Instruct Q4_1 (models/, when present)
and random-weight models at a real shape (`rbee random-model --preset llama3.2-1b`, hidden 2048, 16 layers) of
types q4_0, q8_0, q4_k and q6_k, written once into --model-dir (default build/bench-models) and reused.

Hardware limits in the same run: `rbee bench` measures the F32 GEMM rate (ppN's limit) and the copy bandwidth
(tgN's limit) on every rbee run; each test's line gives both engines' fraction of it.

Usage: tools/bench/compare_llamacpp.py [--llama-bench build-llama/bin/llama-bench] [--threads 2] [-p 512]
       [-n 128] [-r 5] [--rounds 2] [--model M.gguf ...] [--types q4_0,q8_0,q4_k,q6_k] [--json-out results.json]
"""
import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def run_json(cmd):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}")
    out = proc.stdout
    start = out.find("[")
    return json.loads(out[start:])


def llamacpp_python_bench(model, threads, n_prompt, n_gen, reps, seed=42):
    """llama-bench's pp and tg tests through llama-cpp-python; entries shaped like llama-bench's JSON."""
    from llama_cpp import Llama
    llm = Llama(model_path=model, n_ctx=max(n_prompt, n_gen) + 16, n_batch=max(n_prompt, 1),
                n_ubatch=max(n_prompt, 1), n_threads=threads, n_threads_batch=threads, logits_all=False,
                verbose=False)
    rng = random.Random(seed)
    vocab = llm.n_vocab()

    def one(prompt, gen):
        llm.reset()  # the next eval drops every cached position past n_tokens = 0
        if prompt:
            tokens = [rng.randrange(vocab) for _ in range(prompt)]
            t0 = time.perf_counter()
            llm.eval(tokens)
            return time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(gen):
            llm.eval([rng.randrange(vocab)])
        return time.perf_counter() - t0

    out = []
    for prompt, gen in ((n_prompt, 0), (0, n_gen)):
        if prompt + gen == 0:
            continue
        one(prompt, gen)  # warm-up
        secs = [one(prompt, gen) for _ in range(reps)]
        out.append({"test": f"pp{prompt}" if prompt else f"tg{gen}", "n_prompt": prompt, "n_gen": gen,
                    "samples_ts": [(prompt + gen) / s for s in secs]})
    llm.close()
    return out


def test_name(entry):
    if "test" in entry:
        return entry["test"]
    return f"pp{entry['n_prompt']}" if entry["n_prompt"] > 0 else f"tg{entry['n_gen']}"


DEFAULT_TYPES = "q4_0,q8_0,q4_k,q6_k"
DEFAULT_PRESET = "llama3.2-1b"


def default_models(args):
    """SmolLM2 Q4_1 (when present) and the random-weight models of --types, written once into --model-dir."""
    models = []
    smol = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if os.path.exists(smol):
        models.append(smol)
    os.makedirs(args.model_dir, exist_ok=True)
    for t in filter(None, args.types.split(",")):
        path = os.path.join(args.model_dir, f"random-{args.preset}-{t}.gguf")
        if not os.path.exists(path):
            print(f"writing {path}", file=sys.stderr)
            subprocess.run([args.rbee, "random-model", "--preset", args.preset, "--type", t, "-o", path + ".part"],
                           check=True, stdout=subprocess.DEVNULL)
            os.replace(path + ".part", path)
        models.append(path)
    return models


def compare_one(args, model, peer):
    """Alternating rounds of both engines on one model; prints its table and returns its result dict."""
    rbee_cmd = [args.rbee, "bench", "-m", model, "-t", str(args.threads), "-p", str(args.p), "-n", str(args.n),
                "-r", str(args.r), "--json"]
    llama_cmd = [args.llama_bench, "-m", model, "-t", str(args.threads), "-p", str(args.p), "-n", str(args.n),
                 "-r", str(args.r), "-o", "json"]
    samples = {"rbee": {}, "llama.cpp": {}}
    limits = {}  # test -> rbee's entries (limit, fraction of it), one per round
    loads = []
    for rnd in range(args.rounds):
        for engine in ("rbee", "llama.cpp"):
            t0 = time.time()
            if engine == "rbee":
                entries = run_json(rbee_cmd)
            elif args.llama_bench:
                entries = run_json(llama_cmd)
            else:
                entries = llamacpp_python_bench(model, args.threads, args.p, args.n, args.r)
            for entry in entries:
                samples[engine].setdefault(test_name(entry), []).extend(float(x) for x in entry["samples_ts"])
                if "fraction_of_limit" in entry:
                    limits.setdefault(test_name(entry), []).append(entry)
            loads.append(os.getloadavg()[0])
            print(f"{os.path.basename(model)} round {rnd + 1}/{args.rounds}: {engine} done in "
                  f"{time.time() - t0:.1f} s, load {loads[-1]:.1f}", file=sys.stderr)

    print(f"\nmodel {os.path.basename(model)}, {args.threads} threads, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, peer {peer}; "
          f"1-min load average after each run {min(loads):.1f}..{max(loads):.1f}")
    print(f"| {'test':>6} | {'rbee t/s':>17} | {'llama.cpp t/s':>17} | {'rbee / llama.cpp':>16} |")
    print(f"| {'-' * 6} | {'-' * 17} | {'-' * 17} | {'-' * 16} |")
    result = {"model": model, "threads": args.threads, "peer": peer, "load_after_each_run": loads, "tests": {}}
    for test in sorted(samples["rbee"], key=lambda t: (t[:2] != "pp", t)):
        ours, theirs = samples["rbee"][test], samples["llama.cpp"].get(test, [])
        if not theirs:
            continue
        m_o, m_t = statistics.mean(ours), statistics.mean(theirs)
        s_o = statistics.stdev(ours) if len(ours) > 1 else 0.0
        s_t = statistics.stdev(theirs) if len(theirs) > 1 else 0.0
        print(f"| {test:>6} | {m_o:8.1f} ± {s_o:6.1f} | {m_t:8.1f} ± {s_t:6.1f} | {m_o / m_t:16.2f} |")
        result["tests"][test] = {"rbee": {"mean": m_o, "std": s_o, "samples": ours},
                                 "llama.cpp": {"mean": m_t, "std": s_t, "samples": theirs}, "ratio": m_o / m_t}
    for test, entries in limits.items():
        e = entries[-1]
        limit_ts = statistics.mean(x["limit_ts"] for x in entries)
        theirs = samples["llama.cpp"].get(test, [])
        what = (f"GEMM {e['gemm_flops_per_s'] * 1e-9:.1f} GFLOP/s" if e["limit"] == "gemm"
                else f"copy {e['copy_bytes_per_s'] * 1e-9:.1f} GB/s")
        line = (f"{test}: hardware limit {limit_ts:.1f} t/s ({what}, measured by rbee bench); rbee reaches "
                f"{100 * statistics.mean(x['fraction_of_limit'] for x in entries):.1f}%")
        if theirs:
            line += f", llama.cpp {100 * statistics.mean(theirs) / limit_ts:.1f}%"
        print(line)
        if test in result["tests"]:
            result["tests"][test]["limit_ts"] = limit_ts
            result["tests"][test]["limit"] = e["limit"]
            result["tests"][test]["gemm_flops_per_s"] = e.get("gemm_flops_per_s")
            result["tests"][test]["copy_bytes_per_s"] = e.get("copy_bytes_per_s")
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=[], help="a .gguf (repeatable); default: the set above")
    ap.add_argument("--types", default=DEFAULT_TYPES, help="random-weight model types of the default set")
    ap.add_argument("--preset", default=DEFAULT_PRESET, help="`rbee random-model` shape of the default set")
    ap.add_argument("--model-dir", default=os.path.join(ROOT, "build", "bench-models"))
    ap.add_argument("--rbee", default=os.path.join(ROOT, "build", "cpu", "rbee"))
    ap.add_argument("--llama-bench", default=os.environ.get("LLAMA_BENCH", ""))
    ap.add_argument("--threads", "-t", type=int, default=2)
    ap.add_argument("-p", type=int, default=512, help="prompt tokens (ppN)")
    ap.add_argument("-n", type=int, default=128, help="generated tokens (tgN)")
    ap.add_argument("-r", type=int, default=5, help="timed repetitions per bench run")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rbee / llama.cpp rounds")
    ap.add_argument("--json-out", default="")
    args = ap.parse_args()
    if args.llama_bench and not os.path.exists(args.llama_bench):
        ap.error(f"--llama-bench {args.llama_bench} does not exist")
    peer = "llama-bench" if args.llama_bench else "llama-cpp-python"
    models = args.model or default_models(args)
    results = [compare_one(args, m, peer) for m in models]

    print("\nsummary (rbee / llama.cpp):")
    for r in results:
        ratios = ", ".join(f"{t} {v['ratio']:.2f}" for t, v in r["tests"].items())
        print(f"  {os.path.basename(r['model'])}: {ratios}")
    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    print(f"1-min load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump({"load_average": load, "models": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
