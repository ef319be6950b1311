#!/usr/bin/env python3
"""Issue 13's device faults on a GPU (docs/RELIABILITY.md, "Faults"): out of memory at load and mid-batch, injected
through the caching allocator's switches limited to the GPU (RBEE_FAULT_ALLOC_DEVICE), against llm-worker-rbee on
that backend. The same faults run in CI on the CPU backend (tests/api/test_faults.py); this is their GPU run, with
the standard library only (the GPU machine has no test packages).

  scripts/gpu_faults.py --worker BUILD/llm-worker-rbee --model MODEL.gguf [--backend cuda]

Prints one line per check (PASS / FAIL and what was observed) and exits 1 when a check fails.
- at load: RBEE_FAULT_ALLOC_LIMIT=1000000 on the GPU with --no-fit: exit 1 with event=load_failed naming OutOfMemory
  (without --no-fit the memory plan moves the layers to the host CPU and the worker serves from there).
- mid-batch: RBEE_FAULT_ALLOC_SWITCH (every GPU allocation fails while the file exists) touched while a stream runs.
  The stream either ends with an out_of_memory error event or finishes (decode steps replayed as CUDA graphs reuse
  memory they already hold): the line says which. While the switch exists a new request gets 503 out_of_memory with
  Retry-After and /health answers 200; once it is gone the same request gives the same text as before, every KV
  block is free again, and SIGTERM ends the worker with exit 0.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "bench"))
import serving_common  # noqa: E402 (standard library only, like this script)

TOKEN = serving_common.TOKEN  # the workers below are started by serving_common
failures = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def request(url, path, body=None, method=None, timeout=120):
    """(status, headers, body bytes) of one request; HTTP errors are answers, not exceptions."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method or ("POST" if data else "GET"),
                                 headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class Worker(serving_common.Worker):
    """llm-worker-rbee with --parallel 2 on loopback: serving_common's start and readiness wait, plus `url`."""

    def __init__(self, args, env):
        super().__init__(args.worker, args.model, args.backend, "--parallel", "2", env=env)
        self.url = f"http://127.0.0.1:{self.port}"

    def metric(self, name):
        text = request(self.url, "/metrics")[2].decode()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return None


def completion(w):
    return request(w.url, "/v1/completions", {"prompt": "The capital of France is", "max_tokens": 8,
                                              "temperature": 0})


def out_of_memory_at_load(args):
    # --no-fit: by default a worker whose GPU is too small plans the layers onto the host CPU and serves from there
    # (observed on an H100 with this 1 MB limit: "4 of 4 layers on the host CPU to fit (0 on cuda:0)", then ready),
    # which is issue 14's partial offload, not a fault. --no-fit asks for the refusal this check is about.
    env = dict(os.environ, RBEE_FAULT_ALLOC_LIMIT="1000000", RBEE_FAULT_ALLOC_DEVICE=args.backend,
               LLORCH_API_TOKEN="")
    cmd = [args.worker, "--model", args.model, "--backend", args.backend, "--port", "0", "--no-fit"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired as e:
        check(False, f"out of memory at load on {args.backend}: still running after 60 s (it should have refused); "
                     f"log: {(e.stderr or b'')[-500:]!r}")
        return
    failed = [line for line in p.stderr.splitlines() if "event=load_failed" in line]
    check(p.returncode == 1 and failed and "OutOfMemory" in failed[0],
          f"out of memory at load on {args.backend}: exit {p.returncode}, "
          f"{failed[0][:300] if failed else 'no load_failed event: ' + p.stderr[-500:]}")


def out_of_memory_mid_batch(args):
    switch = os.path.join(tempfile.mkdtemp(), "oom")
    w = Worker(args, {"RBEE_FAULT_ALLOC_SWITCH": switch, "RBEE_FAULT_ALLOC_DEVICE": args.backend})
    try:
        status, _, body = completion(w)
        check(status == 200, f"completion before the fault: {status}")
        good = json.loads(body)["choices"][0]["text"] if status == 200 else None
        status, _, body = request(w.url, "/v1/jobs", {"operation": "infer", "prompt": "Count: one, two,",
                                                      "max_tokens": 400, "temperature": 0})
        check(status == 200, f"stream job accepted: {status}")
        job = json.loads(body)
        req = urllib.request.Request(w.url + job["sse_url"], headers={"Authorization": f"Bearer {TOKEN}"})
        events = []
        with urllib.request.urlopen(req, timeout=300) as stream:
            for raw in stream:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                events.append(data if data == "[DONE]" else json.loads(data))
                if len(events) == 2:  # started, first token: the device fills up now
                    open(switch, "w").close()
        errors = [e for e in events if isinstance(e, dict) and e.get("type") == "error"]
        tokens = sum(1 for e in events if isinstance(e, dict) and e.get("type") == "token")
        ended = errors[0].get("code") if errors else "finished"
        check(events and events[-1] == "[DONE]" and (not errors or errors[0].get("code") == "out_of_memory"),
              f"stream running when the device filled up: {tokens} tokens, then {ended}"
              + (f" ({errors[0].get('message', '')[:200]})" if errors else
                 " (its decode steps needed no new memory)") + ", [DONE]")
        status, headers, body = completion(w)
        code = json.loads(body).get("error", {}).get("code") if body else None
        check(status == 503 and code == "out_of_memory" and "Retry-After" in headers,
              f"request while the device is full: {status} {code}, Retry-After {headers.get('Retry-After')}")
        check(request(w.url, "/health", timeout=10)[0] == 200, "/health while the device is full")
        os.unlink(switch)
        status, _, body = completion(w)
        again = json.loads(body)["choices"][0]["text"] if status == 200 else None
        check(status == 200 and again == good, f"after the fault: {status}, same text: {again == good}")
        deadline = time.time() + 10
        while time.time() < deadline:
            free, total = w.metric("rbee_kv_cache_blocks_free"), w.metric("rbee_kv_cache_blocks_total")
            if free is not None and free == total:
                break
            time.sleep(0.1)
        check(free is not None and free == total, f"KV blocks free after the fault: {free} of {total}")
    finally:
        if os.path.exists(switch):
            os.unlink(switch)
        if w.proc.poll() is None:
            w.proc.send_signal(signal.SIGTERM)
        code = w.proc.wait(60)
        check(code == 0, f"SIGTERM: exit {code}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--backend", default="cuda")
    args = ap.parse_args()
    out_of_memory_at_load(args)
    out_of_memory_mid_batch(args)
    print(f"gpu_faults: {len(failures)} failed" + (": " + "; ".join(failures) if failures else ""))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
