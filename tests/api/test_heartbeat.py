"""Heartbeats to a mock hive on loopback: the documented body, every interval; a hive that goes away does not
disturb serving, and heartbeats resume when it comes back."""
import datetime
import time

from conftest import Worker
from worker_process import Hive, wait


def test_heartbeats_and_hive_outage():
    hive = Hive()
    w = Worker("--hive-url", f"http://127.0.0.1:{hive.port}", "--heartbeat-interval", "0.2", "--worker-id", "w-test-1",
               "--model-ref", "hf:HuggingFaceTB/SmolLM2-135M-Instruct:Q4_1")
    try:
        assert wait(lambda: any(b[2]["worker"]["status"] == "ready" for b in hive.beats), 15)
        path, ctype, body = hive.beats[-1]
        assert path == "/v1/worker-heartbeat" and ctype.startswith("application/json")
        assert set(body) == {"worker", "timestamp"}
        wk = body["worker"]
        # issue 15 added "load": the queue, slot and cache figures routers read (test_serving_metrics.py).
        assert set(wk) == {"id", "model_id", "device", "port", "status", "implementation", "version", "vram_used",
                           "vram_total", "devices", "load"}  # devices: per-device memory (issue 14), one entry per device used
        assert isinstance(wk["devices"], list) and len(wk["devices"]) >= 1
        assert set(wk["load"]) == {"queued", "running", "parallel", "kv_cache_usage", "prefix_cache_hit_ratio",
                                   "prefix_cache_hit_tokens", "prefix_cache_queried_tokens", "spec_drafted_tokens",
                                   "spec_accepted_tokens"}
        assert wk["load"]["parallel"] == 4 and wk["load"]["kv_cache_usage"] == 0
        assert wk["id"] == "w-test-1" and wk["model_id"] == "hf:HuggingFaceTB/SmolLM2-135M-Instruct:Q4_1"
        assert wk["implementation"] == "rbee" and wk["device"] == "cpu:0"
        assert wk["port"] == int(w.url.rsplit(":", 1)[1])
        assert isinstance(wk["vram_total"], int) and 0 < wk["vram_used"] <= wk["vram_total"]
        datetime.datetime.fromisoformat(body["timestamp"].replace("Z", "+00:00"))
        n = len(hive.beats)
        time.sleep(1.0)
        assert len(hive.beats) >= n + 3, "heartbeats are not periodic"

        hive.stop()
        # Serving goes on while the hive is down.
        for _ in range(3):
            r = w.post("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0})
            assert r.status_code == 200
        time.sleep(1.5)
        assert w.get("/ready").status_code == 200
        assert any("heartbeat_failed" in line for line in w.lines)

        hive2 = Hive(hive.port)
        try:
            assert wait(lambda: len(hive2.beats) > 0, 20), "heartbeats did not resume after the hive came back"
        finally:
            hive2.stop()
    finally:
        assert w.stop() == 0
