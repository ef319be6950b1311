"""The rbee worker contract of docs/DESIGN.md section 5, checked field by field with a plain HTTP client."""
import datetime
import threading
import time

import requests

from conftest import sse_events
from worker_process import wait


def test_health_needs_no_auth_and_ready(worker):
    r = requests.get(worker.url + "/health", timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "healthy"}
    r = worker.get("/ready")
    assert r.status_code == 200 and r.json() == {"ready": True}


def test_info_fields(worker):
    info = worker.get("/info").json()
    for key in ("worker_id", "model", "model_ref", "backend", "device", "version"):
        assert key in info, key
    assert info["backend"] == "cpu"
    dev = info["device"]
    for key in ("name", "vendor", "arch", "vram_total", "vram_used"):
        assert key in dev, key
    assert isinstance(dev["vram_total"], int) and dev["vram_total"] > 0
    assert isinstance(dev["vram_used"], int) and 0 < dev["vram_used"] <= dev["vram_total"]
    assert dev["arch"] and dev["name"]
    assert info["model"].endswith(".gguf")


def start_job(worker, **body):
    payload = {"operation": "infer", "prompt": "The capital of France is", "max_tokens": 12, "temperature": 0}
    payload.update(body)
    r = worker.post("/v1/jobs", payload)
    assert r.status_code == 200, r.text
    j = r.json()
    assert set(j) == {"job_id", "sse_url"}
    assert j["sse_url"] == f"/v1/jobs/{j['job_id']}/stream"
    return j


def read_stream(worker, sse_url):
    with worker.get(sse_url, stream=True) as r:
        assert r.status_code == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        return list(sse_events(r))


def check_event_order(events, job_id, max_tokens):
    assert events[-1] == "[DONE]"
    body = events[:-1]
    started, end, metrics = body[0], body[-1], body[-2]
    assert started["type"] == "started"
    assert set(started) == {"type", "job_id", "model", "started_at"}
    assert started["job_id"] == job_id and started["model"]
    datetime.datetime.fromisoformat(started["started_at"].replace("Z", "+00:00"))
    tokens = body[1:-2]
    assert tokens, "no token events"
    last_i = -1
    for t in tokens:
        assert t["type"] == "token" and set(t) == {"type", "t", "i"}
        assert isinstance(t["t"], str) and t["t"]
        assert isinstance(t["i"], int) and t["i"] > last_i
        last_i = t["i"]
    assert metrics["type"] == "metrics"
    assert isinstance(metrics["tokens_per_sec"], (int, float)) and metrics["tokens_per_sec"] >= 0
    assert isinstance(metrics["vram_bytes"], int) and metrics["vram_bytes"] > 0
    assert end["type"] == "end"
    assert {"tokens_out", "decode_time_ms", "stop_reason"} <= set(end)
    assert end["stop_reason"] in ("MAX_TOKENS", "EOS", "STOP_SEQUENCE", "CANCELLED", "ERROR")
    assert 1 <= end["tokens_out"] <= max_tokens and end["decode_time_ms"] >= 0
    return "".join(t["t"] for t in tokens), end


def test_job_sse_event_order_and_fields(worker):
    j = start_job(worker)
    events = read_stream(worker, j["sse_url"])
    text, end = check_event_order(events, j["job_id"], 12)
    assert end["stop_reason"] == "MAX_TOKENS" and end["tokens_out"] == 12
    assert "Paris" in text
    # The stream is consumed: the job is gone.
    assert worker.get(j["sse_url"]).status_code == 404


def test_inference_alias_and_same_greedy_text(worker):
    j1 = start_job(worker)
    t1, _ = check_event_order(read_stream(worker, j1["sse_url"]), j1["job_id"], 12)
    r = worker.post("/v1/inference", {"operation": "infer", "prompt": "The capital of France is", "max_tokens": 12,
                                      "temperature": 0})
    assert r.status_code == 200
    j2 = r.json()
    events = read_stream(worker, f"/v1/inference/{j2['job_id']}/stream")
    t2, _ = check_event_order(events, j2["job_id"], 12)
    assert t1 == t2


def test_stop_sequence(worker):
    j = start_job(worker, max_tokens=40)
    full, _ = check_event_order(read_stream(worker, j["sse_url"]), j["job_id"], 40)
    word = "Paris"
    assert word in full
    j = start_job(worker, max_tokens=40, stop=[word])
    text, end = check_event_order(read_stream(worker, j["sse_url"]), j["job_id"], 40)
    assert end["stop_reason"] == "STOP_SEQUENCE"
    assert text == full[: full.index(word)]


def test_non_streaming_job(worker):
    r = worker.post("/v1/jobs", {"operation": "infer", "prompt": "The capital of France is", "max_tokens": 12,
                                 "temperature": 0, "stream": False})
    assert r.status_code == 200, r.text
    j = r.json()
    assert j["stop_reason"] == "MAX_TOKENS" and j["tokens_out"] == 12 and "Paris" in j["text"]


def wait_for(predicate, timeout=20):
    return wait(predicate, timeout)


def blocks_all_free(worker):
    slots = worker.get("/info").json()["slots"]
    return slots["kv_blocks_free"] == slots["kv_blocks_total"] and slots["running"] == 0


def test_delete_cancels_running_job(worker):
    j = start_job(worker, prompt="Count: one, two, three,", max_tokens=2000, temperature=0)
    events = []
    tokens = 0
    with worker.get(j["sse_url"], stream=True) as r:
        for ev in sse_events(r):
            events.append(ev)
            if isinstance(ev, dict) and ev["type"] == "token":
                tokens += 1
                if tokens != 3:
                    continue
                d = worker.delete(f"/v1/jobs/{j['job_id']}")
                assert d.status_code == 200 and d.json() == {"job_id": j["job_id"], "status": "cancelled"}
    assert events[-1] == "[DONE]"
    assert events[-2]["type"] == "end" and events[-2]["stop_reason"] == "CANCELLED"
    assert events[-2]["tokens_out"] < 2000
    assert wait_for(lambda: blocks_all_free(worker)), "cancelled job kept its KV blocks"


def test_client_disconnect_cancels(worker):
    before = worker.metric("rbee_jobs_total", {"stop_reason": "CANCELLED"})
    j = start_job(worker, prompt="Count: one, two, three,", max_tokens=2000, temperature=0)
    r = worker.get(j["sse_url"], stream=True)
    got = 0
    for ev in sse_events(r):
        if isinstance(ev, dict) and ev["type"] == "token":
            got += 1
            if got == 3:
                break
    r.close()  # hang up mid-stream
    assert wait_for(lambda: worker.metric("rbee_jobs_total", {"stop_reason": "CANCELLED"}) == before + 1), \
        "the job kept running after its client left"
    assert wait_for(lambda: blocks_all_free(worker))
    assert any(j["job_id"] in line and "client_disconnected" in line for line in worker.lines)


def test_non_streaming_client_disconnect_cancels(worker):
    """A non-streaming OpenAI completion whose client hangs up is cancelled too (its slot and KV blocks freed)."""
    import json
    import socket
    before = worker.metric("rbee_jobs_total", {"stop_reason": "CANCELLED"})
    body = json.dumps({"prompt": "Count: one, two, three,", "max_tokens": 2000,
                       "temperature": 0}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {worker.token}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    sock = socket.create_connection(("127.0.0.1", int(worker.url.rsplit(":", 1)[1])))
    sock.sendall(head + body)
    assert wait_for(lambda: worker.get("/info").json()["slots"]["running"] == 1), "the completion never started"
    sock.close()  # hang up while the worker is still generating
    assert wait_for(lambda: worker.metric("rbee_jobs_total", {"stop_reason": "CANCELLED"}) == before + 1), \
        "the non-streaming job kept running after its client left"
    assert wait_for(lambda: blocks_all_free(worker))
    assert any("client_disconnected" in line for line in worker.lines)


def test_second_reader_is_refused(worker):
    j = start_job(worker, max_tokens=64)
    first = worker.get(j["sse_url"], stream=True)
    time.sleep(0.2)
    second = worker.get(j["sse_url"])
    assert second.status_code in (404, 409)
    list(sse_events(first))
    first.close()


def test_metrics_families(worker):
    text = worker.get("/metrics").text
    for family in ("rbee_http_requests_total", "rbee_prompt_tokens_total", "rbee_generated_tokens_total",
                   "rbee_queue_depth", "rbee_time_to_first_token_seconds", "rbee_inter_token_latency_seconds",
                   "rbee_vram_used_bytes", "rbee_vram_total_bytes", "rbee_running_sequences",
                   "rbee_decode_tokens_per_second"):
        assert f"# TYPE {family} " in text, family
    assert 'rbee_http_requests_total{route="/v1/jobs",method="POST",status="200"}' in text
    assert "rbee_time_to_first_token_seconds_bucket{le=\"+Inf\"}" in text
    assert worker.metric("rbee_vram_total_bytes") > 0


def test_auth(worker):
    assert requests.get(worker.url + "/info", timeout=10).status_code == 401
    r = requests.get(worker.url + "/v1/models", headers={"Authorization": "Bearer wrong"}, timeout=10)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert r.headers.get("WWW-Authenticate") == "Bearer"
    assert requests.get(worker.url + "/metrics", timeout=10).status_code == 401
    assert requests.post(worker.url + "/v1/jobs", json={}, timeout=10).status_code == 401


def test_page_is_served(worker):
    # The page holds no secret: it loads without the token (issue 13) and asks for it; a token in the address is
    # never a way in (it would land in browser history and proxy logs).
    r = requests.get(worker.url + "/", timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
    assert requests.get(worker.url + "/info?token=" + worker.token, timeout=10).status_code == 401
    assert requests.get(worker.url + "/v1/models?token=" + worker.token, timeout=10).status_code == 401
    assert worker.get("/").status_code == 200
    assert "?token" not in r.text and "location.search" not in r.text
    assert "/v1/chat/completions" in r.text and "http://" not in r.text and "https://" not in r.text


def test_concurrent_jobs_while_streaming(worker):
    """Jobs started while another streams all finish with full output (admission between decode steps)."""
    results = {}

    def run(i):
        j = start_job(worker, prompt=f"Story number {i}:", max_tokens=16)
        _, end = check_event_order(read_stream(worker, j["sse_url"]), j["job_id"], 16)
        results[i] = end["stop_reason"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join()
    assert len(results) == 6 and all(v in ("MAX_TOKENS", "EOS") for v in results.values())
