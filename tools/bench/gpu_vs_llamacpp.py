#!/usr/bin/env python3
"""rbee against llama.cpp on one NVIDIA GPU, same files, same run: the table of issue 10.

On the GPU machine, in one go:
  1. builds llama.cpp (llama-bench, llama-batched-bench; CUDA, default flags) from the source that
     tools/bench/llamacpp_source.sh cut from the pinned llama-cpp-python sdist, in its own process session so that
     it compiles while the models are written;
  2. writes random-weight GGUF models at real shapes with `rbee random-model` (both engines read these files);
  3. runs `rbee bench` and llama-bench alternately per model (tg128 and pp512, -r repetitions each), then the
     batched rows (`rbee bench --batch` against llama-batched-bench, prompts not shared, S_TG = aggregate decode
     tokens/s);
  4. prints one markdown table with rbee / llama.cpp and rbee's fraction of the hardware limit that `rbee bench`
     measured in the same run (copy bandwidth for tg, GEMM rate for pp), and writes every raw result as JSON.

Only the Python standard library is used (the GPU machine has no network).

  tools/bench/llamacpp_source.sh .devpack-llama/llama.cpp                      # here, once (needs PyPI)
  python3 tools/bench/gpu_vs_llamacpp.py --rbee BUILD_DIR --llama-src .devpack-llama/llama.cpp \\
      [--models /tmp/rbee-models] [--rows all] [--reps 3] [--json-out F] [--md-out F]

--rows picks subsets: all, single (tg128 + pp512 of the six models), batched, or a comma list of row names such
as 7b-q4_0,1b-f16,batched-7b-f16. --only-rbee / --only-llama run one engine (the table then shows one side).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

# (row name, random-model preset, weight type)
SINGLE_ROWS = [
    ("7b-q4_0", "llama2-7b", "q4_0"),
    ("7b-q4_k", "llama2-7b", "q4_k"),
    ("7b-q8_0", "llama2-7b", "q8_0"),
    ("7b-f16", "llama2-7b", "f16"),
    ("1b-q4_0", "llama3.2-1b", "q4_0"),
    ("1b-f16", "llama3.2-1b", "f16"),
]
BATCHED_ROWS = [("batched-7b-f16", "llama2-7b", "f16"), ("batched-7b-q4_0", "llama2-7b", "q4_0")]
BATCH_SIZES = [16, 64, 128]
MODEL_LABEL = {"llama2-7b": "Llama-2-7B", "llama3.2-1b": "Llama-3.2-1B"}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd, env=None, timeout=None):
    """Runs cmd, returns stdout; raises with stderr's tail on failure."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


def json_array(text):
    start = text.find("[")
    if start < 0:
        raise RuntimeError(f"no JSON array in output: {text[-500:]}")
    return json.loads(text[start:])


def start_llama_build(src, build, jobs, logfile):
    """Configures and builds llama.cpp in a new process session; returns the Popen."""
    script = (
        f"cmake -S {src} -B {build} -G Ninja -DCMAKE_BUILD_TYPE=Release "
        + ("-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 " if BACKEND == "cuda" else "-DGGML_CUDA=OFF ")
        + f"-DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF "
        f"-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF "
        f"&& cmake --build {build} -j {jobs} --target llama-bench llama-batched-bench"
    )
    if shutil.which("ninja") is None:
        script = script.replace("-G Ninja ", "")
    out = open(logfile, "w")
    return subprocess.Popen(["bash", "-c", script], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def write_model(rbee, preset, wtype, path):
    if os.path.exists(path):
        return
    log(f"writing {path}")
    tmp = path + ".part"
    run([rbee, "random-model", "--preset", preset, "--type", wtype, "-o", tmp])
    os.replace(tmp, path)


BACKEND = "cuda"  # --backend: the rbee backend and llama.cpp's build (cuda, or cpu to try the script without a GPU)


def rbee_single(rbee, model, reps, env):
    entries = json_array(run([rbee, "bench", "-m", model, "--backend", BACKEND, "-p", "512", "-n", "128", "-r",
                              str(reps), "--json"], env=env))
    return {e["test"]: e for e in entries}


def llama_single(bench, model, reps):
    entries = json_array(run([bench, "-m", model, "-ngl", "99", "-p", "512", "-n", "128", "-r", str(reps), "-o",
                              "json"]))
    out = {}
    for e in entries:
        test = f"pp{e['n_prompt']}" if e["n_prompt"] > 0 else f"tg{e['n_gen']}"
        out[test] = e
    return out


def rbee_batched(rbee, model, env):
    entries = json_array(run([rbee, "bench", "-m", model, "--backend", BACKEND, "--batch",
                              ",".join(map(str, BATCH_SIZES)), "-p", "128", "-n", "128", "-r", "1", "--json"], env=env))
    return {e["pl"]: e for e in entries}


def llama_batched(batched_bench, model):
    n_kv = max(BATCH_SIZES) * (128 + 128) + 256
    text = run([batched_bench, "-m", model, "-ngl", "99", "-c", str(n_kv), "-npp", "128", "-ntg", "128", "-npl",
                ",".join(map(str, BATCH_SIZES)), "--output-format", "jsonl"])
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and '"speed_tg"' in line:
            e = json.loads(line)
            out[e["pl"]] = e
    return out


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rbee", required=True, help="rbee build folder (holds the rbee program and its plug-ins)")
    ap.add_argument("--llama-src", help="llama.cpp source from tools/bench/llamacpp_source.sh")
    ap.add_argument("--llama-build", default="/tmp/llama-build", help="llama.cpp build folder (reused if built)")
    ap.add_argument("--models", default="/tmp/rbee-models")
    ap.add_argument("--rows", default="all")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds per single row (samples pooled)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 8)
    ap.add_argument("--only-rbee", action="store_true")
    ap.add_argument("--only-llama", action="store_true")
    ap.add_argument("--backend", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: both engines on the CPU (a check of this script on a machine without a GPU)")
    ap.add_argument("--preset", help="one random-model preset for every row instead of the real shapes "
                    "(e.g. tiny-llama: a quick check of this script)")
    ap.add_argument("--json-out")
    ap.add_argument("--md-out")
    args = ap.parse_args()
    global BACKEND
    BACKEND = args.backend

    rbee = os.path.join(os.path.abspath(args.rbee), "rbee")
    env = dict(os.environ)
    env.setdefault("RBEE_BACKEND_PATH", os.path.abspath(args.rbee))
    want = args.rows.split(",")
    single = [r for r in SINGLE_ROWS if "all" in want or "single" in want or r[0] in want]
    batched = [r for r in BATCHED_ROWS if "all" in want or "batched" in want or r[0] in want]
    use_llama = not args.only_rbee
    use_rbee = not args.only_llama
    os.makedirs(args.models, exist_ok=True)

    bench = os.path.join(args.llama_build, "bin", "llama-bench")
    batched_bench = os.path.join(args.llama_build, "bin", "llama-batched-bench")
    build_proc = None
    if use_llama and not (os.path.exists(bench) and os.path.exists(batched_bench)):
        if not args.llama_src:
            sys.exit("gpu_vs_llamacpp: --llama-src is needed to build llama.cpp")
        log(f"building llama.cpp ({open(os.path.join(args.llama_src, 'LLAMA_CPP_PYTHON_VERSION')).read().strip()})"
            f" in {args.llama_build}")
        build_proc = start_llama_build(os.path.abspath(args.llama_src), args.llama_build, args.jobs,
                                       os.path.join(args.models, "llama-build.log"))

    if args.preset:
        single = [(n, args.preset, w) for n, _, w in single]
        batched = [(n, args.preset, w) for n, _, w in batched]
        MODEL_LABEL.setdefault(args.preset, args.preset)
    files = {}
    for name, preset, wtype in single + batched:
        path = os.path.join(args.models, f"{preset}-{wtype}.gguf")
        write_model(rbee, preset, wtype, path)
        files[name] = path

    if build_proc is not None:
        log("waiting for the llama.cpp build")
        if build_proc.wait() != 0:
            sys.stderr.write(open(os.path.join(args.models, "llama-build.log")).read()[-4000:])
            sys.exit("gpu_vs_llamacpp: llama.cpp build failed")
        log("llama.cpp built")

    results = {"single": {}, "batched": {}, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    try:
        results["device"] = run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]).strip()
    except Exception as e:  # noqa: BLE001 - informational only
        results["device"] = f"unknown ({e})"

    def attempt(what, fn, *fn_args):
        """One engine's run of one row: a failure is recorded (and printed) and the other rows still run."""
        log(what)
        try:
            return fn(*fn_args)
        except Exception as e:  # noqa: BLE001 - the table shows the row as missing, results["errors"] says why
            log(f"FAILED: {what}: {e}")
            results.setdefault("errors", []).append(f"{what}: {e}")
            return None

    def save_partial():
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump(results, f, indent=1)

    for name, preset, wtype in single:
        r = results["single"].setdefault(name, {"rbee": [], "llama": []})
        for _ in range(args.rounds):
            if use_rbee:
                got = attempt(f"{name}: rbee bench", rbee_single, rbee, files[name], args.reps, env)
                if got is not None:
                    r["rbee"].append(got)
            if use_llama:
                got = attempt(f"{name}: llama-bench", llama_single, bench, files[name], args.reps)
                if got is not None:
                    r["llama"].append(got)
            save_partial()
    for name, preset, wtype in batched:
        r = results["batched"].setdefault(name, {})
        if use_rbee:
            r["rbee"] = attempt(f"{name}: rbee bench --batch", rbee_batched, rbee, files[name], env) or {}
        if use_llama:
            r["llama"] = attempt(f"{name}: llama-batched-bench", llama_batched, batched_bench, files[name]) or {}
        save_partial()

    # ---- the table ----
    def mean_of(runs, test, key):
        vals = [run_[test][key] for run_ in runs if test in run_]
        return sum(vals) / len(vals) if vals else None

    lines = ["| model (random weights) | test | rbee t/s | llama.cpp t/s | rbee / llama.cpp | rbee of limit |",
             "|---|---|---|---|---|---|"]
    for name, preset, wtype in single:
        r = results["single"][name]
        for test in ("tg128", "pp512"):
            rb = mean_of(r["rbee"], test, "avg_ts")
            ll = mean_of(r["llama"], test, "avg_ts")
            frac = mean_of(r["rbee"], test, "fraction_of_limit")
            lines.append(f"| {MODEL_LABEL[preset]} {wtype.upper()} | {test} | {fmt(rb)} | {fmt(ll)} | "
                         f"{fmt(ratio(rb, ll), 2)} | {'-' if frac is None else f'{100 * frac:.1f}%'} |")
    for name, preset, wtype in batched:
        r = results["batched"][name]
        for pl in BATCH_SIZES:
            rb = r.get("rbee", {}).get(pl, {}).get("speed_tg")
            ll = r.get("llama", {}).get(pl, {}).get("speed_tg")
            lines.append(f"| {MODEL_LABEL[preset]} {wtype.upper()}, {pl} streams | S_TG (pp128 tg128) | {fmt(rb)} | "
                         f"{fmt(ll)} | {fmt(ratio(rb, ll), 2)} | |")
    limits = []
    for r in results["single"].values():
        for run_ in r["rbee"]:
            for e in run_.values():
                if "copy_bytes_per_s" in e:
                    limits.append((e["copy_bytes_per_s"], e["gemm_flops_per_s"], e.get("gemm_dtype")))
    table = "\n".join(lines)
    print()
    print(f"device: {results['device']}; started {results['started']}")
    if limits:
        copies = [c for c, _, _ in limits]
        gemms = [g for _, g, _ in limits]
        print(f"limits measured by rbee bench in this run: copy {min(copies) / 1e9:.0f}-{max(copies) / 1e9:.0f} GB/s "
              f"(read + write), GEMM {min(gemms) / 1e12:.0f}-{max(gemms) / 1e12:.0f} TFLOP/s ({limits[0][2]})")
    print(table)
    for err in results.get("errors", []):
        print(f"error: {err}")
    results["table"] = table
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=1)
    if args.md_out:
        with open(args.md_out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
