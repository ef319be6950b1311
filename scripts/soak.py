#!/usr/bin/env python3
"""Soak test of llm-worker-rbee (issue 13, docs/RELIABILITY.md): a worker under 2 x --parallel concurrent clients for
a fixed time, with random prompt lengths, random cancels (DELETE) and disconnects, malformed and unauthorized
requests mixed in, and SIGTERM at the end while streams are running.

It passes when: no response was a 5xx; every accepted job ended, finished or cancelled, and the worker counts the
same jobs as the clients (rbee_jobs_total); no job ended in ERROR; the KV cache is whole again when idle
(rbee_kv_cache_blocks_free == total, nothing running or queued); RSS is flat after warm-up (its least-squares slope
times the measured window stays under max(5 % of RSS, 32 MiB)); the streams running at SIGTERM end with [DONE] and
the worker exits 0.

  .venv/bin/python scripts/soak.py --minutes 60 --report soak.json
  .venv/bin/python scripts/soak.py --minutes 5            # the CI mode
Needs `requests` (tools/requirements-test.txt). Only talks to 127.0.0.1.
"""
import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "soak-token-7c1e"
WORDS = ("the bee flies over a field of flowers and brings nectar back to the hive where others wait "
         "for the summer to end while the queen lays eggs in the comb").split()


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.fivexx = []

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def status(self, kind, code, body=""):
        self.add(f"status.{code}")
        if code >= 500:
            with self.lock:
                self.fivexx.append((kind, code, body[:300]))


def prompt_text(rng):
    n = rng.choice((1, 3, 8, 20, 60, 150, 300))
    return " ".join(rng.choice(WORDS) for _ in range(n))


class Client(threading.Thread):
    """One client looping over random actions until `stop` is set."""

    def __init__(self, url, tally, stop, seed):
        super().__init__(daemon=True)
        self.url, self.tally, self.stop, self.rng = url, tally, stop, random.Random(seed)
        self.auth = {"Authorization": f"Bearer {TOKEN}"}

    def run(self):
        actions = [(self.rbee_stream, 30), (self.chat_stream, 20), (self.completion, 15), (self.cancel_by_delete, 10),
                   (self.disconnect, 10), (self.malformed, 15)]
        funcs, weights = zip(*actions)
        while not self.stop.is_set():
            try:
                self.rng.choices(funcs, weights)[0]()
            except requests.RequestException as e:
                self.tally.add("client_errors")
                self.tally.add("client_error." + type(e).__name__)
                time.sleep(0.1)

    def accepted(self, r, kind):
        self.tally.status(kind, r.status_code, r.text if r.status_code >= 500 else "")
        if r.status_code == 429:
            self.tally.add("refused_queue_full")
            time.sleep(0.2)
            return False
        return r.status_code == 200

    def rbee_stream(self):
        body = {"operation": "infer", "prompt": prompt_text(self.rng), "max_tokens": self.rng.randint(1, 48),
                "temperature": self.rng.choice((0, 0.7))}
        r = requests.post(self.url + "/v1/jobs", json=body, headers=self.auth, timeout=60)
        if not self.accepted(r, "jobs"):
            return
        self.tally.add("accepted")
        with requests.get(self.url + r.json()["sse_url"], headers=self.auth, stream=True, timeout=600) as s:
            self.tally.status("stream", s.status_code)
            last = None
            for line in s.iter_lines():
                if line.startswith(b"data: "):
                    last = line[6:]
                    if last != b"[DONE]":
                        ev = json.loads(last)
                        if ev.get("type") == "end":
                            self.tally.add("end." + ev["stop_reason"])
            self.tally.add("completed" if last == b"[DONE]" else "stream_cut")

    def chat_stream(self):
        body = {"messages": [{"role": "user", "content": prompt_text(self.rng)}], "stream": True,
                "max_tokens": self.rng.randint(1, 48), "temperature": 0.5}
        with requests.post(self.url + "/v1/chat/completions", json=body, headers=self.auth, stream=True,
                           timeout=600) as r:
            if not self.accepted(r, "chat"):
                return
            self.tally.add("accepted")
            done = False
            for line in r.iter_lines():
                if line == b"data: [DONE]":
                    done = True
                elif line.startswith(b"data: {") and b'"error"' in line:
                    self.tally.add("stream_error_event")
            self.tally.add("completed" if done else "stream_cut")

    def completion(self):
        body = {"prompt": prompt_text(self.rng), "max_tokens": self.rng.randint(1, 32), "temperature": 0}
        r = requests.post(self.url + "/v1/completions", json=body, headers=self.auth, timeout=600)
        if not self.accepted(r, "completion"):
            return
        self.tally.add("accepted")
        self.tally.add("completed")
        self.tally.add("end." + r.json()["choices"][0]["finish_reason"])

    def cancel_by_delete(self):
        body = {"operation": "infer", "prompt": prompt_text(self.rng), "max_tokens": 64, "temperature": 0.7}
        r = requests.post(self.url + "/v1/jobs", json=body, headers=self.auth, timeout=60)
        if not self.accepted(r, "jobs"):
            return
        self.tally.add("accepted")
        job = r.json()["job_id"]
        time.sleep(self.rng.uniform(0, 0.5))
        d = requests.delete(f"{self.url}/v1/jobs/{job}", headers=self.auth, timeout=30)
        self.tally.status("delete", d.status_code, d.text)
        self.tally.add("cancelled_by_client")

    def disconnect(self):
        body = {"messages": [{"role": "user", "content": prompt_text(self.rng)}], "stream": True, "max_tokens": 64}
        with requests.post(self.url + "/v1/chat/completions", json=body, headers=self.auth, stream=True,
                           timeout=600) as r:
            if not self.accepted(r, "chat"):
                return
            self.tally.add("accepted")
            lines = r.iter_lines()
            for _ in range(self.rng.randint(0, 6)):
                if next(lines, None) is None:
                    break
        self.tally.add("disconnected_by_client")  # leaving the `with` closes the connection mid-stream

    def malformed(self):
        kind = self.rng.randrange(9)
        h = dict(self.auth, **{"Content-Type": "application/json"})
        if kind == 0:
            r = requests.post(self.url + "/v1/jobs", data=b"{not json", headers=h, timeout=30)
        elif kind == 1:
            r = requests.post(self.url + "/v1/jobs", json={"operation": "infer", "max_tokens": 4}, headers=h, timeout=30)
        elif kind == 2:
            r = requests.post(self.url + "/v1/completions", json={"prompt": "x", "max_tokens": -3}, headers=h,
                              timeout=30)
        elif kind == 3:
            r = requests.post(self.url + "/v1/jobs", data=b'{"operation":"infer","prompt":"x","max_tokens":1E9999}',
                              headers=h, timeout=30)
        elif kind == 4:
            r = requests.post(self.url + "/v1/jobs", json={"operation": "infer", "prompt": "x"}, timeout=30,
                              headers={"Authorization": "Bearer wrong"})
        elif kind == 5:
            r = requests.put(self.url + "/v1/jobs", json={}, headers=h, timeout=30)
        elif kind == 6:
            r = requests.get(self.url + "/v1/no/such/route", headers=h, timeout=30)
        elif kind == 7:
            r = requests.post(self.url + "/v1/jobs", data=b"x" * (2 << 20), headers=h, timeout=30)  # > 1 MiB
        else:
            r = requests.post(self.url + "/v1/chat/completions", json={"messages": [], "n": 2}, headers=h, timeout=30)
        self.tally.status("malformed", r.status_code, r.text)
        self.tally.add("malformed")
        if not 400 <= r.status_code < 500:
            self.tally.add("malformed_not_4xx")


def metrics(url):
    text = requests.get(url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30).text
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def jobs_by_reason(m):
    out = {}
    for k, v in m.items():
        g = re.fullmatch(r'rbee_jobs_total\{stop_reason="(\w+)"\}', k)
        if g:
            out[g.group(1)] = v
    return out


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def slope(points):
    """Least-squares slope of (t, y) points."""
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (y - my) for t, y in points) / den if den else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--worker", default=str(ROOT / "build" / "ci" / "llm-worker-rbee"))
    ap.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--warmup-fraction", type=float, default=0.25, help="share of the run before RSS is judged")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--report", help="write the report as JSON here")
    args = ap.parse_args()

    env = dict(os.environ, LLORCH_API_TOKEN=TOKEN, RBEE_LOG_LEVEL="warn")
    proc = subprocess.Popen([args.worker, "--model", args.model, "--host", "127.0.0.1", "--port", "0",
                             "--parallel", str(args.parallel), "--queue-size", str(2 * args.parallel),
                             "--ctx-size", "4096", "--shutdown-timeout", "60"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(env, RBEE_LOG_LEVEL="info"))
    log_lines = []
    port = []

    def read_log():
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            log_lines.append(line)
            m = re.search(r"event=listening host=\S+ port=(\d+)", line)
            if m:
                port.append(int(m.group(1)))
    threading.Thread(target=read_log, daemon=True).start()
    deadline = time.time() + 120
    while not port and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    if not port:
        sys.exit("soak: the worker did not start:\n" + "\n".join(log_lines[-20:]))
    url = f"http://127.0.0.1:{port[0]}"
    while requests.get(url + "/ready", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).status_code != 200:
        time.sleep(0.1)

    before = metrics(url)
    tally, stop = Tally(), threading.Event()
    clients = [Client(url, tally, stop, args.seed * 1000 + i) for i in range(2 * args.parallel)]
    start = time.time()
    for c in clients:
        c.start()
    duration = args.minutes * 60
    rss = []
    while time.time() - start < duration:
        rss.append((time.time() - start, rss_bytes(proc.pid)))
        if proc.poll() is not None:
            break
        time.sleep(min(5.0, max(0.5, duration / 200)))
    stop.set()
    for c in clients:
        c.join(600)
    elapsed = time.time() - start

    # Idle: every job has ended and the cache is whole.
    idle_deadline = time.time() + 60
    while True:
        after = metrics(url)
        if (after.get("rbee_running_sequences", 0) == 0 and after.get("rbee_queue_depth", 0) == 0) or \
                time.time() > idle_deadline:
            break
        time.sleep(0.2)
    jobs_before, jobs_after = jobs_by_reason(before), jobs_by_reason(after)
    server_jobs = {k: jobs_after.get(k, 0) - jobs_before.get(k, 0) for k in jobs_after}

    # SIGTERM while two streams run: both end with [DONE], the worker exits 0.
    final = []

    def last_stream(i):
        r = requests.post(url + "/v1/jobs", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60,
                          json={"operation": "infer", "prompt": f"Story {i}:", "max_tokens": 24, "temperature": 0})
        with requests.get(url + r.json()["sse_url"], headers={"Authorization": f"Bearer {TOKEN}"}, stream=True,
                          timeout=300) as s:
            lines = [ln for ln in s.iter_lines() if ln.startswith(b"data: ")]
        final.append(lines[-1] == b"data: [DONE]" and b'"type":"end"' in lines[-2])
    finals = [threading.Thread(target=last_stream, args=(i,)) for i in range(2)]
    for t in finals:
        t.start()
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    for t in finals:
        t.join(300)
    try:
        exit_code = proc.wait(120)
    except subprocess.TimeoutExpired:
        proc.kill()
        exit_code = "timeout"

    c = tally.counts
    warm = [(t, y) for t, y in rss if t >= args.warmup_fraction * elapsed]
    rss_slope = slope(warm)  # bytes per second
    window = (warm[-1][0] - warm[0][0]) if len(warm) > 1 else 0.0
    rss_end = rss[-1][1] if rss else 0
    growth = rss_slope * window
    growth_limit = max(0.05 * rss_end, 32 << 20)
    accepted = c.get("accepted", 0)
    server_total = sum(server_jobs.values())
    report = {
        "minutes": round(elapsed / 60, 2), "parallel": args.parallel, "clients": len(clients),
        "requests": sum(v for k, v in c.items() if k.startswith("status.")),
        "statuses": {k[7:]: v for k, v in sorted(c.items()) if k.startswith("status.")},
        "accepted_jobs_client": accepted, "jobs_server": server_jobs, "jobs_server_total": server_total,
        "completed_client": c.get("completed", 0), "cancelled_by_client": c.get("cancelled_by_client", 0),
        "disconnected_by_client": c.get("disconnected_by_client", 0), "malformed": c.get("malformed", 0),
        "refused_queue_full": c.get("refused_queue_full", 0), "client_errors": c.get("client_errors", 0),
        "fivexx": tally.fivexx[:20],
        "kv_blocks_free_idle": after.get("rbee_kv_cache_blocks_free"),
        "kv_blocks_total": after.get("rbee_kv_cache_blocks_total"),
        "rss_start_mib": round(rss[0][1] / 2**20, 1) if rss else None, "rss_end_mib": round(rss_end / 2**20, 1),
        "rss_slope_mib_per_hour": round(rss_slope * 3600 / 2**20, 2),
        "rss_growth_after_warmup_mib": round(growth / 2**20, 2), "rss_growth_limit_mib": round(growth_limit / 2**20, 1),
        "sigterm_streams_done": final, "exit_code": exit_code,
    }
    checks = {
        "no 5xx": not tally.fivexx,
        "malformed requests all 4xx": c.get("malformed_not_4xx", 0) == 0,
        "clients and worker count the same jobs": accepted == server_total,
        "no job ended in ERROR": server_jobs.get("ERROR", 0) == 0 and c.get("stream_error_event", 0) == 0,
        "every read stream ended with [DONE]": c.get("stream_cut", 0) == 0,
        "KV cache whole when idle": after.get("rbee_kv_cache_blocks_free") == after.get("rbee_kv_cache_blocks_total")
        and after.get("rbee_running_sequences", 0) == 0 and after.get("rbee_queue_depth", 0) == 0,
        "RSS flat after warm-up": growth <= growth_limit,
        "streams at SIGTERM finished": final == [True, True],
        "exit code 0": exit_code == 0,
        "client connection errors": c.get("client_errors", 0) == 0,
    }
    report["checks"] = checks
    print(json.dumps(report, indent=1))
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1) + "\n")
    failed = [k for k, ok in checks.items() if not ok]
    print(f"soak: {len(checks) - len(failed)} passed, {len(failed)} failed" + (f": {failed}" if failed else ""))
    if failed:
        print("\n".join(log_lines[-30:]), file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
