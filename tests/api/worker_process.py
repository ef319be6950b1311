"""What the API tests of both workers share: a worker process on loopback, SSE parsing, a mock hive."""
import json
import re
import signal
import subprocess
import threading
import time
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

TOKEN = "test-token-5f2a"


class WorkerProcess:
    """One worker process (llm-worker-rbee or sd-worker-rbee) on loopback; its stderr log is kept in self.lines."""

    def __init__(self, binary, model, *extra, token=TOKEN, wait_ready=True, env=None, ready_timeout=60):
        self.token = token
        environ = dict(os.environ)
        environ.pop("LLORCH_API_TOKEN", None)
        if token:
            environ["LLORCH_API_TOKEN"] = token
        environ.setdefault("RBEE_LOG_LEVEL", "info")
        environ.update(env or {})
        args = [binary, "--model", model, "--host", "127.0.0.1", "--port", "0", *extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=environ)
        self.lines = []
        self._port = None
        self._listening = threading.Event()
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        if not self._listening.wait(60):
            self.kill()
            raise RuntimeError("worker did not start listening:\n" + "\n".join(self.lines))
        self.url = f"http://127.0.0.1:{self._port}"
        if wait_ready:
            self.wait_ready(ready_timeout)

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
        code = self.proc.wait(timeout)
        if code != 0:
            # The end of its log, where a sanitizer's report at exit would be (scripts/test_sanitized.sh runs these
            # tests against ASan workers with LeakSanitizer on): pytest shows it with the failing test.
            self._reader.join(5)
            print(f"worker exited with {code}; the end of its log:\n" + "\n".join(self.lines[-80:]))
        return code

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


class Hive:
    def __init__(self, port=0):
        self.beats = []
        hive = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hive.beats.append((self.path, self.headers.get("Content-Type"), json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def wait(predicate, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
