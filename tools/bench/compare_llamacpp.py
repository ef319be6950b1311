#!/usr/bin/env python3
"""rbee vs llama.cpp on the same model, machine and thread count, in the same run: prompt processing (ppN) and
decode (tgN) tokens/s from `rbee bench --json` and `llama-bench -o json`, and the ratios rbee / llama.cpp.

The two engines run alternately for several rounds (rbee, llama.cpp, rbee, llama.cpp, ...) so that a change in
the machine's load hits both; each round is a full bench run of each (one warm-up, then -r timed repetitions).
All timed samples of all rounds are pooled per engine and test.

llama-bench comes from the llama.cpp sources inside the llama-cpp-python sdist (vendor/llama.cpp), built for
the CPU with cmake, e.g.
  cmake -S <sdist>/vendor/llama.cpp -B build-llama -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON
  cmake --build build-llama --target llama-bench

Usage: tools/bench/compare_llamacpp.py --llama-bench build-llama/bin/llama-bench [--threads 2] [-p 512] [-n 128]
       [-r 5] [--rounds 2] [--model models/SmolLM2-135M-Instruct.Q4_1.gguf] [--json-out results.json]
"""
import argparse
import json
import os
import platform
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


def test_name(entry):
    if "test" in entry:
        return entry["test"]
    return f"pp{entry['n_prompt']}" if entry["n_prompt"] > 0 else f"tg{entry['n_gen']}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--rbee", default=os.path.join(ROOT, "build", "cpu", "rbee"))
    ap.add_argument("--llama-bench", default=os.environ.get("LLAMA_BENCH", ""))
    ap.add_argument("--threads", "-t", type=int, default=2)
    ap.add_argument("-p", type=int, default=512, help="prompt tokens (ppN)")
    ap.add_argument("-n", type=int, default=128, help="generated tokens (tgN)")
    ap.add_argument("-r", type=int, default=5, help="timed repetitions per bench run")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rbee / llama.cpp rounds")
    ap.add_argument("--json-out", default="")
    args = ap.parse_args()
    if not args.llama_bench or not os.path.exists(args.llama_bench):
        ap.error("give --llama-bench (or LLAMA_BENCH): the llama-bench binary")

    rbee_cmd = [args.rbee, "bench", "-m", args.model, "-t", str(args.threads), "-p", str(args.p), "-n", str(args.n),
                "-r", str(args.r), "--json"]
    llama_cmd = [args.llama_bench, "-m", args.model, "-t", str(args.threads), "-p", str(args.p), "-n", str(args.n),
                 "-r", str(args.r), "-o", "json"]
    samples = {"rbee": {}, "llama.cpp": {}}
    for rnd in range(args.rounds):
        for engine, cmd in (("rbee", rbee_cmd), ("llama.cpp", llama_cmd)):
            t0 = time.time()
            for entry in run_json(cmd):
                samples[engine].setdefault(test_name(entry), []).extend(float(x) for x in entry["samples_ts"])
            print(f"round {rnd + 1}/{args.rounds}: {engine} done in {time.time() - t0:.1f} s", file=sys.stderr)

    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    print(f"model {os.path.basename(args.model)}, {args.threads} threads, {platform.processor() or platform.machine()}, "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print(f"| {'test':>6} | {'rbee t/s':>17} | {'llama.cpp t/s':>17} | {'rbee / llama.cpp':>16} |")
    print(f"| {'-' * 6} | {'-' * 17} | {'-' * 17} | {'-' * 16} |")
    result = {"model": args.model, "threads": args.threads, "load_average": load, "tests": {}}
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
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
