"""Shared fixtures of the API tests: a real llm-worker-rbee process on loopback with the default model.

The worker binary and model come from RBEE_WORKER_BIN and RBEE_MODEL (ctest sets both); when either is missing
every test is skipped with a message saying what to build or install.
"""
import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
WORKER_BIN = os.environ.get("RBEE_WORKER_BIN", str(ROOT / "build" / "ci" / "llm-worker-rbee"))
MODEL = os.environ.get("RBEE_MODEL", str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
TOKEN = "test-token-5f2a"


def require_worker():
    if not Path(WORKER_BIN).exists():
        pytest.skip(f"worker binary {WORKER_BIN} is missing: build the llm-worker-rbee target")
    if not Path(MODEL).exists():
        pytest.skip(f"model {MODEL} is missing: run scripts/setup.sh")


class Worker:
    """One worker process; its stderr log is kept in self.lines."""

    def __init__(self, *extra, token=TOKEN, binary=None, wait_ready=True, env=None):
        require_worker()
        self.token = token
        environ = dict(os.environ)
        environ.pop("LLORCH_API_TOKEN", None)
        if token:
            environ["LLORCH_API_TOKEN"] = token
        environ.setdefault("RBEE_LOG_LEVEL", "info")
        environ.update(env or {})
        args = [binary or WORKER_BIN, "--model", MODEL, "--host", "127.0.0.1", "--port", "0", *extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=environ)
        self.lines = []
        self._port = None
        self._listening = threading.Event()
        threading.Thread(target=self._read_log, daemon=True).start()
        if not self._listening.wait(60):
            self.kill()
            raise RuntimeError("worker did not start listening:\n" + "\n".join(self.lines))
        self.url = f"http://127.0.0.1:{self._port}"
        if wait_ready:
            self.wait_ready()

    def _read_log(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            m = re.search(r"event=listening host=\S+ port=(\d+)", line)
            if m:
                self._port = int(m.group(1))
                self._listening.set()

    @property
    def headers(self):
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("worker exited:\n" + "\n".join(self.lines))
            r = requests.get(self.url + "/ready", headers=self.headers, timeout=5)
            if r.status_code == 200:
                return
            time.sleep(0.05)
        raise RuntimeError("worker never became ready")

    def get(self, path, **kw):
        kw.setdefault("headers", self.headers)
        kw.setdefault("timeout", 60)
        return requests.get(self.url + path, **kw)

    def post(self, path, body=None, **kw):
        kw.setdefault("headers", self.headers)
        kw.setdefault("timeout", 120)
        return requests.post(self.url + path, json=body, **kw)

    def delete(self, path, **kw):
        kw.setdefault("headers", self.headers)
        kw.setdefault("timeout", 30)
        return requests.delete(self.url + path, **kw)

    def metric(self, name, labels=None):
        """The value of one series in /metrics (0 when absent)."""
        text = self.get("/metrics").text
        want = "" if not labels else "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
        for line in text.splitlines():
            if line.startswith(name + want + " "):
                return float(line.split()[-1])
        return 0.0

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def sse_events(response):
    """Yields each data payload of an SSE response: parsed JSON, or the string "[DONE]"."""
    for line in response.iter_lines(decode_unicode=False):
        if not line or line.startswith(b":"):
            continue
        assert line.startswith(b"data: "), line
        data = line[6:].decode("utf-8")
        yield data if data == "[DONE]" else json.loads(data)


@pytest.fixture(scope="session")
def worker():
    """The shared worker: auth on, 16 slots (the concurrency test needs them)."""
    w = Worker("--parallel", "16", "--ctx-size", "8192")
    yield w
    code = w.stop()
    assert code == 0, "worker did not exit cleanly:\n" + "\n".join(w.lines[-30:])
