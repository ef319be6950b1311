"""What routers read (issue 15): /metrics parses with a strict Prometheus text-format parser and carries rbee's names
and the vLLM names the Gateway API Inference Extension's endpoint picker scrapes; under load the queue depth rises
past --parallel and the KV-cache usage follows the running sequences exactly (blocks are reserved at admission);
the heartbeat carries the same figures; /v1/models answers only once the model is ready; speculative decoding's
per-request figures (accepted / drafted) in responses and metrics; a draft model counted in the memory plan."""
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import requests

import prom_text
from conftest import MODEL, WORKER_BIN, Worker
from worker_process import Hive, sse_events, wait

ROUTER_FAMILIES = {
    "rbee_queue_depth": "gauge", "rbee_running_sequences": "gauge", "rbee_parallel_slots": "gauge",
    "rbee_kv_cache_usage_ratio": "gauge", "rbee_kv_cache_blocks_free": "gauge", "rbee_kv_cache_blocks_total": "gauge",
    "rbee_prefix_cache_hit_ratio": "gauge", "rbee_prefix_cache_blocks": "gauge",
    "rbee_prefix_cache_queried_tokens_total": "counter", "rbee_prefix_cache_hit_tokens_total": "counter",
    "rbee_spec_drafted_tokens_total": "counter", "rbee_spec_accepted_tokens_total": "counter",
    "vllm:num_requests_waiting": "gauge", "vllm:num_requests_running": "gauge",
    "vllm:gpu_cache_usage_perc": "gauge", "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries_total": "counter", "vllm:prefix_cache_hits_total": "counter",
    "vllm:cache_config_info": "gauge", "vllm:lora_requests_info": "gauge",
}


def scrape(w):
    r = w.get("/metrics")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    fams = prom_text.parse(r.text)
    try:  # a second, independent parser when the venv has it (tools/requirements-test.txt)
        from prometheus_client.parser import text_string_to_metric_families
        names = {f.name for f in text_string_to_metric_families(r.text)}
        assert "vllm:num_requests_waiting" in names
    except ImportError:
        pass
    return fams


def figures(fams):
    v = lambda n: prom_text.value(fams, n)  # noqa: E731
    return {"waiting": v("vllm:num_requests_waiting"), "running": v("vllm:num_requests_running"),
            "usage": v("vllm:gpu_cache_usage_perc"), "usage2": v("vllm:kv_cache_usage_perc"),
            "queue": v("rbee_queue_depth"), "seqs": v("rbee_running_sequences"), "ratio": v("rbee_kv_cache_usage_ratio"),
            "free": v("rbee_kv_cache_blocks_free"), "total": v("rbee_kv_cache_blocks_total")}


def test_parser_rejects_what_scrapers_reject():
    good = ("# HELP a_total Things.\n# TYPE a_total counter\na_total 3\n# TYPE h histogram\n"
            'h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 3.5\nh_count 2\n# TYPE g gauge\ng{x="a\\"b\\\\c\\n"} -Inf\n')
    fams = prom_text.parse(good)
    assert fams["g"].samples[0][1] == {"x": 'a"b\\c\n'}
    bad = [
        "a 1",                                                             # no final newline
        "# TYPE a gauge\na 1\na 2\n",                                      # duplicate series
        "a 1\n# TYPE a gauge\n",                                           # TYPE after samples
        "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na{x=\"1\"} 2\n",        # a's lines not together
        "# TYPE a counter\na -1\n",                                        # negative counter
        '# TYPE a gauge\na{x="\\t"} 1\n',                                  # bad escape
        '# TYPE a gauge\na{x="1",x="2"} 1\n',                              # duplicate label
        "# TYPE 1a gauge\n",                                               # bad name
        '# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n',  # not cumulative
        '# TYPE h histogram\nh_bucket{le="1"} 1\nh_sum 1\nh_count 1\n',   # no +Inf
        "# TYPE a gauge\na 1 x\n",                                         # bad timestamp
        "# TYPE a gauge\na one\n",                                         # bad value
    ]
    for text in bad:
        with pytest.raises(prom_text.FormatError):
            prom_text.parse(text)


def test_metrics_parse_strictly_and_carry_the_router_names(worker):
    assert requests.get(worker.url + "/metrics", timeout=5).status_code == 401, "without --public-probes"
    fams = scrape(worker)
    for name, kind in ROUTER_FAMILIES.items():
        assert name in fams, f"/metrics lacks {name}"
        assert fams[name].type == kind, f"{name} is a {fams[name].type}, expected {kind}"
    f = figures(fams)
    assert f["usage"] == f["usage2"] == f["ratio"]
    assert 0.0 <= f["usage"] <= 1.0
    assert f["free"] <= f["total"] and f["total"] == 8192 // 16
    info = [l for s, l, v in fams["vllm:cache_config_info"].samples]
    assert info == [{"block_size": "16", "num_gpu_blocks": "512"}]
    # The endpoint picker ignores a LoRA series whose adapter lists are both empty (rbee serves no adapters).
    lora = fams["vllm:lora_requests_info"].samples[0][1]
    assert lora == {"max_lora": "0", "running_lora_adapters": "", "waiting_lora_adapters": ""}
    # Every family of the worker parses, histograms included.
    assert fams["rbee_time_to_first_token_seconds"].type == "histogram"


def job(w, i, max_tokens=2000):
    # Distinct first blocks: no two jobs share a cached prefix, so each holds its own reservation.
    prompt = [1000 + 97 * i + k for k in range(40)]
    r = w.post("/v1/jobs", {"operation": "infer", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                            "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()["job_id"]


def test_metrics_and_heartbeat_follow_queue_and_running_sequences():
    hive = Hive()
    w = Worker("--parallel", "2", "--ctx-size", "8192", "--queue-size", "16", "--hive-url",
               f"http://127.0.0.1:{hive.port}", "--heartbeat-interval", "0.2")
    try:
        f = figures(scrape(w))
        assert (f["waiting"], f["running"], f["usage"]) == (0, 0, 0)
        total = f["total"]
        per_job = -(-(40 + 2000) // 16)  # blocks reserved at admission: prompt + max_tokens
        ids = [job(w, i) for i in range(6)]
        assert wait(lambda: figures(scrape(w))["running"] == 2, 30)
        f = figures(scrape(w))
        assert f["waiting"] == 4 > 2, f"queue depth did not rise past --parallel: {f}"
        assert f["queue"] == f["waiting"] and f["seqs"] == f["running"]
        assert f["usage"] == pytest.approx(2 * per_job / total), f
        assert f["free"] == total - 2 * per_job
        # The heartbeat carries the same figures. One heartbeat may be taken while a job moves from the queue to the
        # running set (the sanitizer build once saw queued 4, running 1): wait for the settled pair.
        def settled(b):
            load = b[2]["worker"].get("load", {})
            return load.get("queued") == 4 and load.get("running") == 2
        assert wait(lambda: any(settled(b) for b in hive.beats), 10)
        load = [b[2]["worker"]["load"] for b in hive.beats if settled(b)][-1]
        assert load["parallel"] == 2
        assert load["kv_cache_usage"] == pytest.approx(2 * per_job / total)
        assert w.get("/info").json()["load"]["queued"] == 4

        # Cancel the queued ones: the queue drains, the running pair keeps its blocks. A cancel takes effect at the
        # scheduler's next step (a decode step of the two jobs: seconds on a loaded 2-core machine), hence 60 s.
        for jid in ids[2:]:
            assert w.delete(f"/v1/jobs/{jid}").status_code == 200
        assert wait(lambda: figures(scrape(w))["waiting"] == 0, 60)
        f = figures(scrape(w))
        assert f["running"] == 2 and f["usage"] == pytest.approx(2 * per_job / total)
        # One running job ends: usage halves (its published blocks are parked, which counts as free).
        assert w.delete(f"/v1/jobs/{ids[0]}").status_code == 200
        assert wait(lambda: figures(scrape(w))["running"] == 1, 60)
        assert figures(scrape(w))["usage"] == pytest.approx(per_job / total)
        assert w.delete(f"/v1/jobs/{ids[1]}").status_code == 200
        assert wait(lambda: figures(scrape(w))["running"] == 0, 60)
        f = figures(scrape(w))
        assert (f["waiting"], f["running"], f["usage"], f["free"]) == (0, 0, 0, total)
    finally:
        hive.stop()
        assert w.stop() == 0


def test_prefix_cache_hits_show_in_metrics_and_usage(worker):
    before = prom_text.value(scrape(worker), "vllm:prefix_cache_hits_total")
    system = "You are the assistant of a library. " * 30
    cached = []
    for q in ("Which books are new?", "When do you open?"):
        r = worker.post("/v1/chat/completions", {"messages": [{"role": "system", "content": system},
                                                             {"role": "user", "content": q}],
                                                "max_tokens": 4, "temperature": 0})
        assert r.status_code == 200, r.text
        cached.append(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
    assert cached[1] >= 160, f"the second chat did not reuse the system prompt: {cached}"
    fams = scrape(worker)
    assert prom_text.value(fams, "vllm:prefix_cache_hits_total") - before >= cached[1]
    assert 0 < prom_text.value(fams, "rbee_prefix_cache_hit_ratio") <= 1
    assert prom_text.value(fams, "vllm:prefix_cache_hits_total") <= prom_text.value(fams, "vllm:prefix_cache_queries_total")


def test_no_prefix_cache_flag_and_public_probes():
    w = Worker("--no-prefix-cache", "--public-probes")
    try:
        # --public-probes: Kubernetes probes and metric scrapers send no token.
        assert requests.get(w.url + "/ready", timeout=5).status_code == 200
        assert requests.get(w.url + "/metrics", timeout=5).status_code == 200
        assert requests.get(w.url + "/v1/models", timeout=5).status_code == 401
        assert requests.get(w.url + "/info", timeout=5).status_code == 401
        system = "You are the assistant of a library. " * 30
        for _ in range(2):
            r = w.post("/v1/chat/completions", {"messages": [{"role": "system", "content": system},
                                                            {"role": "user", "content": "Hello"}],
                                               "max_tokens": 2, "temperature": 0})
            assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        fams = scrape(w)
        assert prom_text.value(fams, "vllm:prefix_cache_queries_total") == 0
        assert prom_text.value(fams, "rbee_prefix_cache_blocks") == 0
    finally:
        assert w.stop() == 0


def test_models_answers_only_once_ready():
    # RBEE_FAULT_LOAD_DELAY_MS holds the load back for 3 s (docs/RELIABILITY.md), so the loading state is seen for
    # sure (SmolLM2 alone loads in well under a second).
    w = Worker(wait_ready=False, env={"RBEE_FAULT_LOAD_DELAY_MS": "3000"})
    try:
        seen = []
        deadline = time.time() + 60
        while time.time() < deadline:
            models = requests.get(w.url + "/v1/models", headers=w.headers, timeout=5)
            ready = requests.get(w.url + "/ready", headers=w.headers, timeout=5)
            seen.append((models.status_code, ready.status_code))
            if models.status_code == 200:
                assert ready.status_code == 200, "/v1/models listed the model before /ready said so"
                assert models.json()["data"][0]["object"] == "model"
                break
            assert models.status_code == 503 and models.json()["error"]["code"] == "loading"
            assert "Retry-After" in models.headers
            # /health stays a liveness check: 200 while loading.
            assert requests.get(w.url + "/health", timeout=5).status_code == 200
            time.sleep(0.1)
        assert seen[-1][0] == 200
        assert seen[0] == (503, 503), f"the first answers were not 'loading': {seen[:3]}"
        assert sum(1 for m, _ in seen if m == 503) >= 5, seen
    finally:
        assert w.stop() == 0


# A copy-heavy task: the answer repeats most of the prompt, so prompt lookup drafts well.
EDIT_TEXT = ("The hive inspection on Monday found eight frames of brood, two frames of honey and a calm queen. "
             "The hive inspection on Tuesday found seven frames of brood, three frames of honey and a calm queen. ")
EDIT_PROMPT = "Text: " + EDIT_TEXT + "\nThe same text again, word for word:\nText:"


def test_speculative_stats_per_request_and_in_metrics(worker):
    """Prompt lookup (--spec prompt-lookup): greedy text equals the plain worker's; each response says how many
    draft tokens were accepted and rejected (usage.completion_tokens_details), the rbee job stream's metrics event
    says drafted/accepted, and the worker's counters advance by the same amounts."""
    body = {"prompt": EDIT_PROMPT, "max_tokens": 48, "temperature": 0}
    plain = worker.post("/v1/completions", body)
    assert plain.status_code == 200, plain.text
    w = Worker("--spec", "prompt-lookup", "--spec-tokens", "4")
    try:
        before = scrape(w)
        r = w.post("/v1/completions", body)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["choices"][0]["text"] == plain.json()["choices"][0]["text"], "speculation changed greedy text"
        d = out["usage"]["completion_tokens_details"]
        accepted, rejected = d["accepted_prediction_tokens"], d["rejected_prediction_tokens"]
        assert accepted > 0 and rejected >= 0, d
        assert accepted < out["usage"]["completion_tokens"], d  # each step emits one token of the target's own
        assert plain.json()["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] == 0
        after = scrape(w)
        grow = lambda n: prom_text.value(after, n) - prom_text.value(before, n)  # noqa: E731
        assert grow("rbee_spec_accepted_tokens_total") == accepted
        assert grow("rbee_spec_drafted_tokens_total") == accepted + rejected
        # The rbee job API: the metrics event carries the same per-request figures.
        job = w.post("/v1/jobs", {"operation": "infer", "prompt": EDIT_PROMPT, "max_tokens": 48, "temperature": 0})
        assert job.status_code == 200, job.text
        events = [e for e in sse_events(w.get(job.json()["sse_url"], stream=True)) if isinstance(e, dict)]
        metrics = [e for e in events if e.get("type") == "metrics"]
        assert len(metrics) == 1, events[-3:]
        assert metrics[0]["spec_accepted"] == accepted and metrics[0]["spec_drafted"] == accepted + rejected
        assert w.get("/info").json()["load"]["spec_accepted_tokens"] == 2 * accepted
    finally:
        assert w.stop() == 0


def test_draft_model_is_in_the_memory_plan_and_a_draft_that_does_not_fit_is_refused():
    """--draft: the worker's memory plan counts the draft model on the device of the logits (/info's memory_plan),
    and with an allocator limit that holds the model alone but not both, the load is refused before any weight is
    read, naming the draft; `rbee plan --draft` says the same."""
    rbee = str(Path(WORKER_BIN).with_name("rbee"))
    if not Path(rbee).exists():
        pytest.skip(f"{rbee} is missing: build the rbee target")
    # The worker's largest step with --draft (speculation on, 4 draft tokens): a 256-token prompt chunk beside
    # 4 jobs x 5 rows.
    common = ["--ctx-size", "1024", "--parallel", "4", "--batch-tokens", str(256 + 4 * 5), "--spec-tokens", "4",
              "--backend", "cpu"]

    def plan(*extra, env=None):
        p = subprocess.run([rbee, "plan", "-m", MODEL, "--json", *common, *extra], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, **(env or {})))
        return p, (json.loads(p.stdout) if p.stdout.strip().startswith("{") else None)

    p_alone, alone = plan()
    p_with, with_draft = plan("--draft", MODEL)
    assert p_alone.returncode == 0 and p_with.returncode == 0, p_with.stderr[-1000:]
    dev = with_draft["devices"][0]
    assert with_draft["draft"] == MODEL and dev["draft"] + dev["draft_mapped"] > 0
    assert dev["total"] == alone["devices"][0]["total"] + dev["draft"] + dev["draft_mapped"]

    # The worker with the draft: its plan (in /info) is the one rbee plan printed, same figures.
    w = Worker("--draft", MODEL, "--ctx-size", "1024", "--parallel", "4")
    try:
        info = w.get("/info").json()["memory_plan"]
        assert info["draft"] == MODEL and info["devices"][0]["draft"] == dev["draft"]
        assert info["devices"][0]["total"] == dev["total"]
        r = w.post("/v1/completions", {"prompt": EDIT_PROMPT, "max_tokens": 16, "temperature": 0})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] > 0
    finally:
        assert w.stop() == 0

    # Room for the model alone (plus half of what the draft adds), not for both: refused at load, naming the draft.
    limit = str(alone["devices"][0]["total"] + (dev["draft"] + dev["draft_mapped"]) // 2)
    p_small, _ = plan(env={"RBEE_FAULT_ALLOC_LIMIT": limit})
    assert p_small.returncode == 0, p_small.stdout[-1000:]
    p_small, _ = plan("--draft", MODEL, env={"RBEE_FAULT_ALLOC_LIMIT": limit})
    assert p_small.returncode == 1
    env = dict(os.environ, RBEE_FAULT_ALLOC_LIMIT=limit, LLORCH_API_TOKEN="")
    p = subprocess.run([WORKER_BIN, "--model", MODEL, "--port", "0", "--draft", MODEL, "--ctx-size", "1024",
                        "--parallel", "4", "--backend", "cpu"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "event=load_failed" in p.stderr and "OutOfMemory" in p.stderr, p.stderr[-2000:]
    assert "with the draft model" in p.stderr and "event=model_loaded" not in p.stderr, p.stderr[-2000:]
