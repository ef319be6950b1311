"""Faults injected into a running worker (issue 13, docs/RELIABILITY.md): the device running out of memory mid-batch
and at load (RBEE_FAULT_ALLOC_SWITCH / RBEE_FAULT_ALLOC_LIMIT in the caching allocator), a GPU plug-in that fails
to load, and the model file truncated while mapped. Each gets a clear error or a 503, and where the worker can go
on it stays up and serves the next request."""
import os
import shutil
import subprocess

import requests

from conftest import MODEL, WORKER_BIN, Worker, require_worker, sse_events, wait
from worker_process import WorkerProcess


def completion(w, **extra):
    return w.post("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0,
                                      **extra})


def test_out_of_memory_mid_batch_is_503_and_the_worker_recovers(tmp_path):
    switch = tmp_path / "oom"
    w = Worker("--parallel", "2", env={"RBEE_FAULT_ALLOC_SWITCH": str(switch)})
    try:
        good = completion(w)
        assert good.status_code == 200
        # A stream running when the device fills up ends with an error event naming the cause.
        job = w.post("/v1/jobs", {"operation": "infer", "prompt": "Count: one, two,", "max_tokens": 400,
                                  "temperature": 0}).json()
        it = sse_events(w.get(job["sse_url"], stream=True))
        assert next(it)["type"] == "started"
        assert next(it)["type"] == "token"
        switch.touch()
        events = list(it)
        errors = [e for e in events if isinstance(e, dict) and e.get("type") == "error"]
        assert errors and errors[0]["code"] == "out_of_memory", events[-4:]
        assert "out of memory" in errors[0]["message"]
        assert events[-1] == "[DONE]"
        # Requests while the device is full: 503 with Retry-After, never a 500; /health stays up.
        r = completion(w)
        assert r.status_code == 503 and r.json()["error"]["code"] == "out_of_memory", r.text
        assert "Retry-After" in r.headers
        assert requests.get(w.url + "/health", timeout=10).status_code == 200
        switch.unlink()
        # Memory back: the same request gives the same answer as before, and the KV cache is whole.
        again = completion(w)
        assert again.status_code == 200
        assert again.json()["choices"][0]["text"] == good.json()["choices"][0]["text"]
        assert wait(lambda: w.metric("rbee_kv_cache_blocks_free") == w.metric("rbee_kv_cache_blocks_total"), 10)
    finally:
        assert w.stop() == 0


def test_out_of_memory_at_load_is_a_clear_error():
    env = dict(os.environ, RBEE_FAULT_ALLOC_LIMIT="1000000", LLORCH_API_TOKEN="")
    p = subprocess.run([WORKER_BIN, "--model", MODEL, "--port", "0"], capture_output=True, text=True, timeout=120,
                       env=env)
    assert p.returncode == 1, p.stderr[-2000:]
    # The memory plan refuses before any weight is read (OutOfMemory, "does not fit", with the numbers).
    assert "event=load_failed" in p.stderr and "OutOfMemory" in p.stderr and "does not fit" in p.stderr, \
        p.stderr[-2000:]


def test_plugin_that_fails_to_load(tmp_path):
    (tmp_path / "librbee_backend_cuda.so").write_bytes(b"\x7fELF this is not a shared library")
    w = Worker(env={"RBEE_BACKEND_PATH": str(tmp_path)})
    try:
        assert any("librbee_backend_cuda.so: not loaded" in line for line in w.lines), w.lines[:10]
        assert w.get("/info").json()["backend"] == "cpu"  # auto falls back and serves
        assert completion(w).status_code == 200
    finally:
        assert w.stop() == 0
    env = dict(os.environ, RBEE_BACKEND_PATH=str(tmp_path), LLORCH_API_TOKEN="")
    p = subprocess.run([WORKER_BIN, "--model", MODEL, "--port", "0", "--backend", "cuda"], capture_output=True,
                       text=True, timeout=60, env=env)
    assert p.returncode != 0 and "cuda" in p.stderr.lower() and p.returncode > 0, p.stderr[-1500:]


def test_model_file_truncated_while_mapped(tmp_path):
    copy = tmp_path / "model.gguf"
    shutil.copyfile(MODEL, copy)
    require_worker()
    w = WorkerProcess(WORKER_BIN, str(copy))
    try:
        assert completion(w).status_code == 200
        os.truncate(copy, 1 << 20)  # a download or copy rewriting the file in place
        try:
            completion(w)
        except requests.RequestException:
            pass
        code = w.proc.wait(60)
        assert code == 75, (code, w.lines[-5:])
        assert any("was truncated or rewritten while the worker had it mapped" in line and str(copy) in line
                   for line in w.lines), w.lines[-5:]
    finally:
        w.kill()
