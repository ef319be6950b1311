"""Lifecycle: /ready while loading, graceful SIGTERM (running jobs finish, new ones are refused, exit 0), SIGTERM
with no grace (running jobs end CANCELLED), the -cpu binary name, and the default bind address."""
import os
import signal
import threading
import time

import requests

from conftest import WORKER_BIN, Worker, sse_events


def test_ready_reports_progress_then_ready():
    w = Worker(wait_ready=False)
    try:
        seen = []
        deadline = time.time() + 60
        while time.time() < deadline:
            r = requests.get(w.url + "/ready", headers=w.headers, timeout=5)
            seen.append((r.status_code, r.json()))
            if r.status_code == 200:
                break
        assert seen[-1] == (200, {"ready": True})
        for status, body in seen[:-1]:
            assert status == 503 and body["ready"] is False and body["reason"] == "loading"
            assert 0.0 <= body["progress"] <= 1.0
        # /health answers during loading too (it was polled implicitly by the fixture's start-up).
        assert requests.get(w.url + "/health", timeout=5).status_code == 200
    finally:
        assert w.stop() == 0


def test_sigterm_finishes_running_jobs_and_exits_0():
    w = Worker("--shutdown-timeout", "60")
    r = w.post("/v1/jobs", {"operation": "infer", "prompt": "Count: one, two,", "max_tokens": 16, "temperature": 0})
    job = r.json()
    events = []
    stream = w.get(job["sse_url"], stream=True)
    it = sse_events(stream)
    events.append(next(it))
    events.append(next(it))  # the first token: the job is running
    w.proc.send_signal(signal.SIGTERM)
    # New work is refused while draining (503), or the port is already closed.
    time.sleep(0.1)
    try:
        refused = w.post("/v1/jobs", {"operation": "infer", "prompt": "x", "max_tokens": 2}, timeout=10)
        assert refused.status_code == 503, refused.text
        assert "Retry-After" in refused.headers
    except requests.ConnectionError:
        pass
    events.extend(it)
    assert events[-1] == "[DONE]"
    end = events[-2]
    assert end["type"] == "end" and end["stop_reason"] in ("MAX_TOKENS", "EOS"), end
    assert w.proc.wait(60) == 0
    assert any("event=stopped" in line for line in w.lines)


def test_sigterm_without_grace_cancels():
    w = Worker("--shutdown-timeout", "0")
    job = w.post("/v1/jobs", {"operation": "infer", "prompt": "Count: one, two,", "max_tokens": 2000,
                              "temperature": 0}).json()
    stream = w.get(job["sse_url"], stream=True)
    it = sse_events(stream)
    next(it)
    next(it)
    w.proc.send_signal(signal.SIGTERM)
    events = list(it)
    assert events[-1] == "[DONE]" and events[-2]["stop_reason"] == "CANCELLED"
    assert w.proc.wait(60) == 0


def test_sigterm_lets_queued_jobs_finish_within_the_grace():
    """Jobs accepted (200, stream open) but still queued when SIGTERM comes run to their end within the grace
    period instead of being cancelled (issue 13)."""
    w = Worker("--parallel", "1", "--shutdown-timeout", "120")
    jobs = [w.post("/v1/jobs", {"operation": "infer", "prompt": f"Count to ten, take {i}: one, two,",
                                "max_tokens": 12, "temperature": 0}).json() for i in range(3)]
    streams = [sse_events(w.get(j["sse_url"], stream=True)) for j in jobs]
    first = [next(streams[0]), next(streams[0])]  # started, then a token: job 0 runs, 1 and 2 wait
    assert first[0]["type"] == "started" and first[1]["type"] == "token"
    w.proc.send_signal(signal.SIGTERM)
    ends = []
    for i, it in enumerate(streams):
        events = (first if i == 0 else []) + list(it)
        assert events[-1] == "[DONE]", events
        ends.append(events[-2])
    assert [e["type"] for e in ends] == ["end"] * 3, ends
    assert all(e["stop_reason"] in ("MAX_TOKENS", "EOS") for e in ends), ends
    assert w.proc.wait(60) == 0


def test_backend_from_program_name(tmp_path):
    link = tmp_path / "llm-worker-rbee-cpu"
    os.symlink(WORKER_BIN, link)
    w = Worker(binary=str(link))
    try:
        assert w.get("/info").json()["backend"] == "cpu"
    finally:
        assert w.stop() == 0
    cuda = tmp_path / "llm-worker-rbee-cuda"
    os.symlink(WORKER_BIN, cuda)
    import subprocess
    p = subprocess.run([str(cuda), "--model", "x.gguf", "--backend", "cpu"], capture_output=True, timeout=30)
    assert p.returncode == 2 and b"contradicts" in p.stderr


def test_sigint_also_graceful_and_parallel_clients():
    w = Worker("--parallel", "2")
    results = []

    def go():
        r = w.post("/v1/completions", {"prompt": "Hello", "max_tokens": 8, "temperature": 0})
        results.append(r.status_code)

    ts = [threading.Thread(target=go) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert results == [200] * 4
    assert w.stop(signal.SIGINT) == 0
