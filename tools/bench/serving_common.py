"""What the serving benchmarks share (Python standard library only: they also run on GPU machines without
network or pip): starting a worker, waiting for it, streaming an OpenAI chat request, percentiles, load."""
import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time

TOKEN = "bench-token"


class Worker:
    """llm-worker-rbee on loopback with the given flags; the port is read from its "listening" log line."""

    def __init__(self, binary, model, backend, *flags, env=None):
        environ = dict(os.environ, LLORCH_API_TOKEN=TOKEN, RBEE_LOG_LEVEL="info")
        environ.update(env or {})
        self.cmd = [binary, "--model", model, "--backend", backend, "--host", "127.0.0.1", "--port", "0", *flags]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=environ)
        self.lines = []
        self.port = None
        got = threading.Event()

        def read():
            for raw in self.proc.stderr:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self.lines.append(line)
                m = re.search(r"event=listening host=\S+ port=(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    got.set()

        threading.Thread(target=read, daemon=True).start()
        if not got.wait(120):
            self.stop()
            raise RuntimeError("worker did not start:\n" + "\n".join(self.lines[-20:]))
        deadline = time.time() + 600
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("worker exited:\n" + "\n".join(self.lines[-20:]))
            status, _ = self.request("GET", "/ready")
            if status == 200:
                return
            time.sleep(0.1)
        raise RuntimeError("worker never became ready")

    def request(self, method, path, body=None, timeout=600):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        try:
            return r.status, json.loads(data) if data else None
        except json.JSONDecodeError:
            return r.status, data.decode("utf-8", "replace")

    def stream_chat(self, body, timeout=1800):
        """Streams /v1/chat/completions. Returns (ttft seconds to the first content, total seconds, text, usage)."""
        body = dict(body, stream=True, stream_options={"include_usage": True})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        t0 = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=headers)
        r = conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {r.read()[:500]!r}")
        ttft, text, usage = None, [], None
        for raw in r:
            line = raw.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                raise RuntimeError(ev["error"]["message"])
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices", []):
                piece = ch.get("delta", {}).get("content")
                if piece:
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    text.append(piece)
        total = time.perf_counter() - t0
        conn.close()
        return ttft if ttft is not None else total, total, "".join(text), usage

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class Clients:
    """Client threads of one measured run against a worker: run(n, client) starts client() on n threads at once
    and returns the wall time; chat() streams one request and, when it raises, records the error (counted and
    reported, never fatal) and returns None. `lock` guards what the clients record."""

    def __init__(self, worker):
        self.worker = worker
        self.lock = threading.Lock()
        self.errors = []

    def chat(self, body):
        try:
            return self.worker.stream_chat(body)
        except Exception as e:  # noqa: BLE001 - counted and reported
            with self.lock:
                self.errors.append(repr(e))
            return None

    def run(self, n, client, *args_of):
        """client(*args_of[i]) on thread i (no arguments when args_of is empty); the wall time of them all."""
        threads = [threading.Thread(target=client, args=args_of[i] if args_of else ()) for i in range(n)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - t0


def no_timeout(extra):
    """Worker flags that lift the per-request time limit (600 s by default), unless `extra` sets one: on a loaded
    CPU a request may wait that long for its first token, and a benchmark must measure it, not lose it."""
    return [] if "--request-timeout" in extra else ["--request-timeout", "86400"]


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def load_average():
    """The 1-minute load average and the core count (uptime's figures)."""
    return os.getloadavg()[0], os.cpu_count()


def uptime_line():
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        la = os.getloadavg()
        return f"load average: {la[0]:.2f}, {la[1]:.2f}, {la[2]:.2f}"
