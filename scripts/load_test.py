#!/usr/bin/env python3
"""Bounded load test of llm-worker-rbee on loopback (not part of ctest; takes --duration seconds).

Starts a worker with the default model, runs --concurrency client threads that each stream
/v1/completions requests back to back until --duration has passed, samples the worker's resident memory, and
prints (and with --report, writes) a markdown summary: requests by status, p50/p99 time to first token, aggregate
generated tokens/s, and resident memory after warm-up. Exits 1 on any 5xx or when memory grew by more than
--max-rss-growth after warm-up.

  .venv/bin/python scripts/load_test.py --worker build/cpu/llm-worker-rbee --duration 300 --concurrency 32
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [
    "The capital of France is", "Once upon a time, a small bee", "Write a haiku about the sea:",
    "The three primary colors are", "In 1969, the first humans", "A good recipe for pancakes needs",
    "Explain what a compiler does:", "The quick brown fox", "My favourite season is", "Photosynthesis is",
    "List three uses of copper:", "To make a cup of tea,", "The history of Rome began", "Water boils at",
    "Describe a thunderstorm:", "The best way to learn programming is",
]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", default=str(ROOT / "build" / "cpu" / "llm-worker-rbee"))
    ap.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--duration", type=float, default=300.0, help="seconds of load (after which clients stop)")
    ap.add_argument("--warmup", type=float, default=30.0, help="seconds before memory is taken as the baseline")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--parallel", type=int, default=32, help="the worker's --parallel")
    ap.add_argument("--min-tokens", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--max-rss-growth", type=float, default=0.10)
    ap.add_argument("--report", help="write the markdown summary to this file")
    args = ap.parse_args()

    token = "load-test-token"
    env = dict(os.environ, LLORCH_API_TOKEN=token, RBEE_LOG_LEVEL="info")  # the port is read from the "listening" line
    worker = subprocess.Popen([args.worker, "--model", args.model, "--host", "127.0.0.1", "--port", "0",
                               "--parallel", str(args.parallel), "--queue-size", str(4 * args.concurrency),
                               "--ctx-size", str(args.parallel * 256)],
                              stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    port = None
    log_tail = []
    for raw in worker.stderr:
        line = raw.decode("utf-8", "replace")
        log_tail.append(line)
        m = re.search(r"event=listening host=\S+ port=(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        print("worker did not start:\n" + "".join(log_tail), file=sys.stderr)
        return 1
    threading.Thread(target=lambda: [None for _ in worker.stderr], daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"}
    while requests.get(url + "/ready", headers=headers, timeout=5).status_code != 200:
        time.sleep(0.1)
    cpu = requests.get(url + "/info", headers=headers, timeout=5).json()["device"]["name"]

    load_before = os.getloadavg()[0]
    lock = threading.Lock()
    statuses, ttfts, tokens = {}, [], [0]
    errors = []
    start = time.time()
    stop_at = start + args.duration

    def client(k):
        rng = random.Random(k)
        session = requests.Session()
        while time.time() < stop_at:
            body = {"prompt": rng.choice(PROMPTS), "max_tokens": rng.randint(args.min_tokens, args.max_tokens),
                    "temperature": 0.7, "seed": rng.randint(0, 1 << 30), "stream": True,
                    "stream_options": {"include_usage": True}}
            t0 = time.time()
            try:
                r = session.post(url + "/v1/completions", json=body, headers=headers, stream=True, timeout=300)
                first, used = None, 0
                if r.status_code == 200:
                    for line in r.iter_lines():
                        if not line.startswith(b"data: ") or line == b"data: [DONE]":
                            continue
                        ev = json.loads(line[6:])
                        if "error" in ev:
                            raise RuntimeError(ev["error"]["message"])
                        if first is None and ev["choices"] and ev["choices"][0]["text"]:
                            first = time.time() - t0
                        if ev.get("usage"):
                            used = ev["usage"]["completion_tokens"]
                else:
                    r.content
                with lock:
                    statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                    if first is not None:
                        ttfts.append(first)
                    tokens[0] += used
            except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                with lock:
                    errors.append(repr(e))
                    statuses["exception"] = statuses.get("exception", 0) + 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(args.concurrency)]
    for t in threads:
        t.start()
    rss = []
    while any(t.is_alive() for t in threads):
        rss.append((time.time() - start, rss_kib(worker.pid)))
        time.sleep(5)
    for t in threads:
        t.join()
    elapsed = time.time() - start
    rss.append((elapsed, rss_kib(worker.pid)))
    worker.terminate()
    code = worker.wait(120)

    after = [kib for t, kib in rss if t >= args.warmup]
    base = after[0] if after else rss[0][1]
    peak = max(after) if after else base
    growth = (peak - base) / base if base else 0.0
    n5xx = sum(v for k, v in statuses.items() if isinstance(k, int) and k >= 500)
    total = sum(statuses.values())
    lines = [
        f"| what | value |",
        f"|---|---|",
        f"| machine | {cpu}, {os.cpu_count()} CPUs; 1-min load average {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after (shared machine: other builds run beside the worker) |",
        f"| load | {args.concurrency} concurrent streams, worker --parallel {args.parallel}, "
        f"max_tokens {args.min_tokens}-{args.max_tokens}, {elapsed:.0f} s |",
        f"| requests | {total} ({', '.join(f'{k}: {v}' for k, v in sorted(statuses.items(), key=str))}) |",
        f"| 5xx | {n5xx} |",
        f"| time to first token p50 / p99 | {percentile(ttfts, 50) * 1e3:.0f} ms / {percentile(ttfts, 99) * 1e3:.0f} ms |",
        f"| aggregate generated tokens/s | {tokens[0] / elapsed:.1f} |",
        f"| resident memory after {args.warmup:.0f} s warm-up: first / peak / last | "
        f"{base / 1024:.1f} / {peak / 1024:.1f} / {rss[-1][1] / 1024:.1f} MiB ({growth * 100:+.1f}%) |",
        f"| worker exit code after SIGTERM | {code} |",
    ]
    summary = "\n".join(lines)
    print(summary)
    if errors:
        print(f"{len(errors)} client errors, first: {errors[0]}", file=sys.stderr)
    if args.report:
        Path(args.report).write_text(summary + "\n")
    ok = n5xx == 0 and not errors and growth <= args.max_rss_growth and code == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
