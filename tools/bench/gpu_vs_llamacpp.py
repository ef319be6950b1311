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

--multi-gpu N runs the multi-device table instead (issue 14) on N GPUs: Llama-2-7B F16 tg128 / pp512 on one GPU,
with rbee's --split tensor and --split layer over N GPUs and llama.cpp's -sm none / -sm tensor / -sm layer, the same
with 64 batched streams (S_TG), and a Llama-2-70B-shape Q8_0 model with both splits (and on one GPU, where it fits).
--multi-rows picks from 7b, batched, 70b (default all three).
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


COMMAND_TIMEOUT = None  # --timeout: seconds one engine command may run (a hung run then fails its row only)


def run(cmd, env=None, timeout=None):
    """Runs cmd, returns stdout; raises with stderr's tail on failure (or when it runs past the timeout)."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          timeout=timeout or COMMAND_TIMEOUT)
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


def rbee_single(rbee, model, reps, env, devices=None, tests=("512", "128")):
    """rbee bench on the --backend device, or with `devices` (e.g. --devices cuda:0,cuda:1 --split tensor)."""
    where = devices if devices else ["--backend", BACKEND]
    entries = json_array(run([rbee, "bench", "-m", model, *where, "-p", tests[0], "-n", tests[1], "-r",
                              str(reps), "--json"], env=env))
    return {e["test"]: e for e in entries}


def llama_single(bench, model, reps, extra=None, tests=("512", "128")):
    entries = json_array(run([bench, "-m", model, "-ngl", "99", *(extra or []), "-p", tests[0], "-n", tests[1], "-r",
                              str(reps), "-o", "json"]))
    out = {}
    for e in entries:
        test = f"pp{e['n_prompt']}" if e["n_prompt"] > 0 else f"tg{e['n_gen']}"
        out[test] = e
    return out


def rbee_batched(rbee, model, env, devices=None, sizes=None):
    sizes = sizes or BATCH_SIZES
    where = devices if devices else ["--backend", BACKEND]
    entries = json_array(run([rbee, "bench", "-m", model, *where, "--batch", ",".join(map(str, sizes)), "-p", "128",
                              "-n", "128", "-r", "1", "--json"], env=env))
    return {e["pl"]: e for e in entries}


def llama_batched(batched_bench, model, extra=None, sizes=None):
    sizes = sizes or BATCH_SIZES
    n_kv = max(sizes) * (128 + 128) + 256
    text = run([batched_bench, "-m", model, "-ngl", "99", *(extra or []), "-c", str(n_kv), "-npp", "128", "-ntg",
                "128", "-npl", ",".join(map(str, sizes)), "--output-format", "jsonl"])
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


def multi_gpu(args, rbee, env, bench, batched_bench, use_rbee, use_llama):
    """The multi-device table (see --multi-gpu). Writes results as it goes (a run cut short keeps what it had)."""
    n = args.multi_gpu
    devices = ",".join(f"cuda:{i}" for i in range(n))
    modes = [("1 GPU", None, ["-sm", "none", "-mg", "0"]),
             # llama.cpp's tensor parallelism is -sm tensor (LLAMA_SPLIT_MODE_TENSOR; flash attention on, which
             # its default "auto" turns on): the CUDA backend of this version has no split buffers, so -sm row
             # fails to load ("device CUDA0 does not support split buffers"). -sm is a common option, so
             # llama-batched-bench takes it too.
             (f"tensor x{n}", ["--devices", devices, "--split", "tensor"], ["-sm", "tensor"]),
             (f"layer x{n}", ["--devices", devices, "--split", "layer"], ["-sm", "layer"])]
    want = args.multi_rows.split(",")
    m7 = os.path.join(args.models, "llama2-7b-f16.gguf")
    m70 = os.path.join(args.models, "llama2-70b-q8_0.gguf")
    results = {"multi": [], "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    try:
        results["device"] = run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]).strip()
    except Exception as e:  # noqa: BLE001 - informational only
        results["device"] = f"unknown ({e})"

    def save():
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump(results, f, indent=1)

    def attempt(label, fn):
        log(label)
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - one failed run must not lose the others
            log(f"{label}: FAILED {e}")
            return {"error": str(e)[-800:]}

    rows = []
    if "7b" in want:
        for mode, rb_args, ll_args in modes:
            r = {"model": "Llama-2-7B F16", "mode": mode, "kind": "single"}
            if use_rbee:
                r["rbee"] = attempt(f"7b {mode}: rbee bench", lambda: rbee_single(rbee, m7, args.reps, env, rb_args))
            if use_llama:
                r["llama"] = attempt(f"7b {mode}: llama-bench {' '.join(ll_args)}",
                                     lambda: llama_single(bench, m7, args.reps, ll_args))
            results["multi"].append(r)
            save()
    if "batched" in want:
        for mode, rb_args, ll_args in modes:
            r = {"model": "Llama-2-7B F16", "mode": mode, "kind": "batched"}
            if use_rbee:
                r["rbee"] = attempt(f"batched {mode}: rbee bench --batch 64",
                                    lambda: rbee_batched(rbee, m7, env, rb_args, [64]))
            if use_llama:
                r["llama"] = attempt(f"batched {mode}: llama-batched-bench",
                                     lambda: llama_batched(batched_bench, m7, ll_args, [64]))
            results["multi"].append(r)
            save()
    if "70b" in want:
        # One GPU too: on a card that holds the model (an 80 GB H100 holds 70B Q8_0 at 4096 positions and one
        # sequence, docs/perf-notes/multi-device.md) it is the base of the splits' ratios; elsewhere its row fails
        # and the table shows "-".
        for mode, rb_args, ll_args in modes:
            r = {"model": "Llama-2-70B shape Q8_0", "mode": mode, "kind": "single"}
            if use_rbee:
                r["rbee"] = attempt(f"70b {mode}: rbee bench",
                                    lambda: rbee_single(rbee, m70, 1, env, rb_args, ("512", "64")))
            if use_llama:
                r["llama"] = attempt(f"70b {mode}: llama-bench {' '.join(ll_args)}",
                                     lambda: llama_single(bench, m70, 1, ll_args, ("512", "64")))
            results["multi"].append(r)
            save()

    def value(side, test, key):
        return side.get(test, {}).get(key) if isinstance(side, dict) else None

    # "rbee of limit": rbee bench's fraction of the limit it measured in the same process (tg: bytes per token over
    # one card's copy bandwidth; under a tensor split the most loaded card's bytes, so two cards can reach 2x one).
    base, llama_base = {}, {}
    lines = ["| model (random weights) | test | mode | rbee t/s | llama.cpp t/s | rbee / llama.cpp | rbee / rbee 1 GPU | "
             "llama.cpp / llama.cpp 1 GPU | rbee of limit |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results["multi"]:
        tests = ["tg128", "pp512"] if r["kind"] == "single" else [64]
        if r["model"].startswith("Llama-2-70B"):
            tests = ["tg64", "pp512"]
        for test in tests:
            key = "avg_ts" if r["kind"] == "single" else "speed_tg"
            rb = value(r.get("rbee", {}), test, key)
            ll = value(r.get("llama", {}), test, key)
            if r["mode"] == "1 GPU":
                base[(r["model"], r["kind"], test)] = rb
                llama_base[(r["model"], r["kind"], test)] = ll
            b = base.get((r["model"], r["kind"], test))
            lb = llama_base.get((r["model"], r["kind"], test))
            frac = value(r.get("rbee", {}), test, "fraction_of_limit") if r["kind"] == "single" else None
            name = test if r["kind"] == "single" else "S_TG, 64 streams (pp128 tg128)"
            lines.append(f"| {r['model']} | {name} | {r['mode']} | {fmt(rb)} | {fmt(ll)} | {fmt(ratio(rb, ll), 2)} | "
                         f"{fmt(ratio(rb, b), 3)} | {fmt(ratio(ll, lb), 3)} | {fmt(frac, 3)} |")
    table = "\n".join(lines)
    print()
    print(f"devices: {results['device']}; started {results['started']}")
    print(table)
    results["table"] = table
    save()
    if args.md_out:
        with open(args.md_out, "w") as f:
            f.write(table + "\n")


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
    ap.add_argument("--prepare-only", action="store_true",
                    help="build llama.cpp and write the models, then stop (a first device call; the rows run in the next)")
    ap.add_argument("--json-out")
    ap.add_argument("--md-out")
    ap.add_argument("--multi-gpu", type=int, default=0, help="run the multi-device table over this many GPUs")
    ap.add_argument("--multi-rows", default="7b,batched,70b")
    ap.add_argument("--timeout", type=float, default=0,
                    help="seconds one benchmark command may run before its row is recorded as failed (0: no limit)")
    args = ap.parse_args()
    global BACKEND, COMMAND_TIMEOUT
    BACKEND = args.backend
    COMMAND_TIMEOUT = args.timeout if args.timeout > 0 else None

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

    if args.multi_gpu:
        want_multi = args.multi_rows.split(",")
        if "7b" in want_multi or "batched" in want_multi:
            write_model(rbee, "llama2-7b", "f16", os.path.join(args.models, "llama2-7b-f16.gguf"))
        if "70b" in want_multi:
            write_model(rbee, "llama2-70b", "q8_0", os.path.join(args.models, "llama2-70b-q8_0.gguf"))
        if build_proc is not None:
            log("waiting for the llama.cpp build")
            if build_proc.wait() != 0:
                sys.stderr.write(open(os.path.join(args.models, "llama-build.log")).read()[-4000:])
                sys.exit("gpu_vs_llamacpp: llama.cpp build failed")
        if args.prepare_only:
            log("prepared: llama.cpp built, multi-GPU models written")
            return
        multi_gpu(args, rbee, env, bench, batched_bench, use_rbee, use_llama)
        return

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
    if args.prepare_only:
        log("prepared: llama.cpp built, models written")
        return

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
