"""Continuous batching seen from outside: 16 concurrent greedy streams give exactly the text of 16 sequential runs;
a full queue answers 429 with Retry-After."""
import threading

import requests

from conftest import Worker, sse_events

PROMPTS = [
    "The capital of France is", "Once upon a time, a small bee", "def fibonacci(n):", "The three primary colors are",
    "In 1969, the first humans", "A good recipe for pancakes needs", "Rust and C++ are both", "The quick brown fox",
    "My favourite season is", "Photosynthesis is the process", "The largest planet in our solar system",
    "To make a cup of tea,", "The history of the Roman Empire", "Water boils at", "A haiku about autumn:",
    "The best way to learn programming is",
]


def stream_text(worker, prompt):
    r = worker.post("/v1/completions", {"prompt": prompt, "max_tokens": 16, "temperature": 0, "stream": True},
                    stream=True)
    assert r.status_code == 200, r.text
    text, reason = "", None
    for ev in sse_events(r):
        if ev == "[DONE]":
            break
        ch = ev["choices"][0]
        text += ch["text"]
        reason = ch["finish_reason"] or reason
    return text, reason


def test_sixteen_concurrent_greedy_streams_equal_sequential(worker):
    sequential = [stream_text(worker, p) for p in PROMPTS]
    concurrent = [None] * len(PROMPTS)
    barrier = threading.Barrier(len(PROMPTS))

    def run(i):
        barrier.wait()
        concurrent[i] = stream_text(worker, PROMPTS[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, p in enumerate(PROMPTS):
        assert concurrent[i] == sequential[i], f"prompt {i} {p!r}: batched {concurrent[i]!r} != alone {sequential[i]!r}"
    slots = worker.get("/info").json()["slots"]
    assert slots["max_batch_rows"] >= 8, f"the streams were not batched together: {slots}"


def test_queue_full_is_429_with_retry_after():
    w = Worker("--parallel", "1", "--queue-size", "1")
    try:
        body = {"operation": "infer", "prompt": "Count: one, two,", "max_tokens": 400, "temperature": 0}
        first = w.post("/v1/jobs", body).json()
        s1 = w.get(first["sse_url"], stream=True)  # running
        next(sse_events(s1))
        second = w.post("/v1/jobs", body)          # queued
        assert second.status_code == 200
        third = w.post("/v1/jobs", body)           # refused
        assert third.status_code == 429, third.text
        assert int(third.headers["Retry-After"]) >= 1
        assert third.json()["error"]["code"] == "queue_full"
        for j in (first, second.json()):
            assert w.delete(f"/v1/jobs/{j['job_id']}").status_code == 200
        s1.close()
        r = w.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2})
        assert r.status_code == 200
    finally:
        assert w.stop() == 0
