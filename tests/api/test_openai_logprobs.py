"""Token log-probabilities through the openai client: chat (logprobs, top_logprobs) and completions (logprobs N,
echo with the prompt's), streamed and not. That the numbers are the log-softmax of the model's logits is checked
in C++ against an independent computation (tests/server/test_scheduler_choices.cpp); here: shapes, consistency
between the routes and between streaming and not."""
import math

import pytest

MESSAGES = [{"role": "user", "content": "List twenty colors, one per line."}]


def test_chat_logprobs(model_id, client):
    r = client.chat.completions.create(model=model_id, messages=MESSAGES, max_tokens=12, temperature=0, logprobs=True,
                                       top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert r.choices[0].finish_reason == "length"
    assert len(content) == r.usage.completion_tokens == 12
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        assert t.top_logprobs[0].token == t.token, "greedy picks the most likely token"
        assert abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob
        assert bytes(t.bytes).decode("utf-8", "replace") == t.token or "\ufffd" in t.token
        assert sum(math.exp(x.logprob) for x in t.top_logprobs) <= 1.0 + 1e-5
    streamed = []
    for c in client.chat.completions.create(model=model_id, messages=MESSAGES, max_tokens=12, temperature=0, logprobs=True,
                                            top_logprobs=3, stream=True):
        if c.choices and c.choices[0].logprobs and c.choices[0].logprobs.content:
            streamed += c.choices[0].logprobs.content
    assert [(t.token, round(t.logprob, 5)) for t in streamed] == [(t.token, round(t.logprob, 5)) for t in content]
    plain = client.chat.completions.create(model=model_id, messages=MESSAGES, max_tokens=4, temperature=0)
    assert plain.choices[0].logprobs is None


def test_logprobs_do_not_depend_on_temperature(model_id, client):
    a = client.chat.completions.create(model=model_id, messages=MESSAGES, max_tokens=1, temperature=0, logprobs=True,
                                       top_logprobs=5)
    b = client.chat.completions.create(model=model_id, messages=MESSAGES, max_tokens=1, temperature=1.5, seed=3,
                                       logprobs=True, top_logprobs=5)
    ta = [(x.token, round(x.logprob, 5)) for x in a.choices[0].logprobs.content[0].top_logprobs]
    tb = [(x.token, round(x.logprob, 5)) for x in b.choices[0].logprobs.content[0].top_logprobs]
    assert ta == tb


def test_completion_logprobs_and_echo(model_id, client, worker):
    prompt = "The capital of France is"
    n_prompt = worker.post("/tokenize", {"prompt": prompt}).json()["count"]
    r = client.completions.create(model=model_id, prompt=prompt, max_tokens=6, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    assert "".join(lp.tokens) == r.choices[0].text
    assert all(len(t) <= 2 for t in lp.top_logprobs) and lp.text_offset[0] == 0
    echo = client.completions.create(model=model_id, prompt=prompt, max_tokens=6, temperature=0, logprobs=2, echo=True)
    e = echo.choices[0].logprobs
    assert echo.choices[0].text == prompt + r.choices[0].text
    assert len(e.tokens) == n_prompt + 6
    assert e.token_logprobs[0] is None and e.top_logprobs[0] is None
    assert all(x <= 0 for x in e.token_logprobs[1:])
    assert e.token_logprobs[n_prompt:] == pytest.approx(lp.token_logprobs, abs=1e-5)
    assert e.text_offset[n_prompt] == len(prompt)
    # The prompt's logprobs alone (how evaluation harnesses score text).
    only = client.completions.create(model=model_id, prompt=prompt, max_tokens=0, temperature=0, logprobs=0, echo=True)
    o = only.choices[0].logprobs
    assert only.choices[0].text == prompt and only.usage.completion_tokens == 0
    assert o.token_logprobs == pytest.approx(e.token_logprobs[:n_prompt], abs=1e-5, nan_ok=True) or \
        (o.token_logprobs[0] is None and o.token_logprobs[1:] == pytest.approx(e.token_logprobs[1:n_prompt], abs=1e-5))


def test_completion_logprobs_streamed(model_id, client):
    prompt = "Once upon a time"
    full = client.completions.create(model=model_id, prompt=prompt, max_tokens=8, temperature=0, logprobs=1, echo=True)
    tokens, values, text = [], [], ""
    for c in client.completions.create(model=model_id, prompt=prompt, max_tokens=8, temperature=0, logprobs=1, echo=True,
                                       stream=True):
        if not c.choices:
            continue
        text += c.choices[0].text
        if c.choices[0].logprobs:
            tokens += c.choices[0].logprobs.tokens
            values += c.choices[0].logprobs.token_logprobs
    assert text == full.choices[0].text
    assert tokens == full.choices[0].logprobs.tokens
    assert values[1:] == pytest.approx(full.choices[0].logprobs.token_logprobs[1:], abs=1e-5)


def test_job_stream_logprobs(worker):
    from conftest import sse_events
    r = worker.post("/v1/jobs", {"operation": "infer", "prompt": "The capital of France is", "max_tokens": 6,
                                 "temperature": 0, "logprobs": True, "top_logprobs": 2})
    j = r.json()
    with worker.get(j["sse_url"], stream=True) as s:
        events = [e for e in sse_events(s) if isinstance(e, dict)]
    toks = [lp for e in events if e["type"] == "token" for lp in e["logprobs"]]
    toks += [lp for e in events if e["type"] == "end" for lp in e.get("logprobs", [])]
    assert len(toks) == 6 and all(len(t["top_logprobs"]) == 2 and t["logprob"] <= 0 for t in toks)
    blocking = worker.post("/v1/jobs", {"operation": "infer", "prompt": "The capital of France is", "max_tokens": 6,
                                        "temperature": 0, "logprobs": True, "top_logprobs": 2, "stream": False}).json()
    assert [t["token"] for t in blocking["logprobs"]] == [t["token"] for t in toks]
