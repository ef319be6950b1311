"""Tool calling end to end through the openai client, on the tiny Llama model of tests/data with real chat
templates that carry tools (--chat-template): Qwen2.5's and Hermes 3's (<tool_call> blocks), Llama 3.1's (JSON
with "parameters") and Mistral-Nemo's ([TOOL_CALLS]). The tiny model's weights are random, so what it says is noise:
forced choices (required, a named function) are constrained by a grammar and must parse and match the tool's
schema; "auto" is steered into each family's format by a grammar (rbee's extension field) to check that the
model's own format is parsed into tool_calls, streamed and not. The default model's template has no tools: 400."""
import json
from pathlib import Path

import openai
import pytest

from conftest import Worker, openai_client

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "data" / "tiny_models" / "llama" / "model.gguf"
TEMPLATES = ROOT / "tests" / "data" / "chat_templates"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a time zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string", "pattern": "^[A-Z]{3}$"}},
                   "required": ["zone"]}}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def tiny_worker(template):
    if not TINY.exists():
        pytest.skip(f"{TINY} is missing")
    return Worker("--chat-template", str(TEMPLATES / template), "--ctx-size", "4096", "--parallel", "4",
                  binary=None, model=str(TINY))


@pytest.fixture(scope="module")
def qwen_worker():
    w = tiny_worker("Qwen-Qwen2.5-7B-Instruct.jinja")
    yield w
    assert w.stop() == 0


def check_weather_args(args):
    a = json.loads(args)
    assert set(a) == {"city", "unit"} and isinstance(a["city"], str) and len(a["city"]) <= 12
    assert a["unit"] in ("celsius", "fahrenheit")


def collect_stream(stream):
    """Accumulates tool-call deltas the way OpenAI's clients do; returns (content, calls, finish_reason)."""
    content, calls, finish = "", {}, None
    for chunk in stream:
        for ch in chunk.choices:
            d = ch.delta
            content += d.content or ""
            for tc in d.tool_calls or []:
                c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                if tc.id:
                    c["id"] = tc.id
                if tc.function and tc.function.name:
                    c["name"] = tc.function.name
                if tc.function and tc.function.arguments:
                    c["arguments"] += tc.function.arguments
            if ch.finish_reason:
                finish = ch.finish_reason
    return content, [calls[i] for i in sorted(calls)], finish


def test_named_tool_choice(qwen_worker):
    c = openai_client(qwen_worker)
    model = c.models.list().data[0].id
    r = c.chat.completions.create(model=model, messages=ASK, tools=[WEATHER, TIME], max_tokens=200, temperature=1.0,
                                  seed=1, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content is None
    assert len(ch.message.tool_calls) == 1
    call = ch.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    check_weather_args(call.function.arguments)
    content, calls, finish = collect_stream(c.chat.completions.create(
        model=model, messages=ASK, tools=[WEATHER, TIME], max_tokens=200, temperature=1.0, seed=1, stream=True,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}))
    assert finish == "tool_calls" and content == ""
    assert [(x["name"], x["arguments"]) for x in calls] == [("get_weather", call.function.arguments)]
    assert calls[0]["id"].startswith("call_")


def test_required_tool_choice(qwen_worker):
    c = openai_client(qwen_worker)
    model = c.models.list().data[0].id
    for seed in range(4):
        r = c.chat.completions.create(model=model, messages=ASK, tools=[WEATHER, TIME], max_tokens=300,
                                      temperature=1.0, seed=seed, tool_choice="required", parallel_tool_calls=False)
        calls = r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason == "tool_calls" and len(calls) == 1, r
        assert calls[0].function.name in ("get_weather", "get_time")
        if calls[0].function.name == "get_weather":
            check_weather_args(calls[0].function.arguments)
        else:
            zone = json.loads(calls[0].function.arguments)["zone"]
            assert len(zone) == 3 and zone.isupper()
    content, calls, finish = collect_stream(c.chat.completions.create(
        model=model, messages=ASK, tools=[WEATHER, TIME], max_tokens=300, temperature=1.0, seed=7, stream=True,
        tool_choice="required", parallel_tool_calls=False))
    # (With parallel calls allowed the array has no bound, and the tiny model's random weights keep adding calls.)
    assert finish == "tool_calls" and len(calls) == 1
    for call in calls:
        assert call["name"] in ("get_weather", "get_time") and json.loads(call["arguments"]) is not None


# What each family's model writes for one call of get_weather(city="Oslo", unit="celsius"), as a GBNF grammar
# that makes the tiny model write it (the markers are plain text in the tiny vocabulary).
def literal(text):
    return "root ::= " + json.dumps(text)


FAMILIES = [
    ("Qwen-Qwen2.5-7B-Instruct.jinja",
     '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}\n</tool_call>'),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
     '<tool_call>\n{"arguments": {"city": "Oslo", "unit": "celsius"}, "name": "get_weather"}\n</tool_call>'),
    ("meta-llama-Llama-3.1-8B-Instruct.jinja",
     '{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "celsius"}}'),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja",
     '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}, "id": "a1b2c3d4e"}]'),
]


@pytest.mark.parametrize("template,output", FAMILIES, ids=["qwen2.5", "hermes3", "llama3.1", "mistral-nemo"])
def test_auto_parses_the_model_format(template, output):
    w = tiny_worker(template)
    try:
        c = openai_client(w)
        model = c.models.list().data[0].id
        msgs = [{"role": "system", "content": "You are a weather bot."}, *ASK]
        # The template shows the tools to the model.
        plain = w.post("/tokenize", {"messages": msgs}).json()
        shown = w.post("/tokenize", {"messages": msgs, "tools": [WEATHER]}).json()
        assert "get_weather" in shown["prompt"] and "get_weather" not in plain["prompt"]
        body = {"grammar": literal(output)}
        r = c.chat.completions.create(model=model, messages=msgs, tools=[WEATHER], max_tokens=200, temperature=0,
                                      extra_body=body)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls", ch
        assert [(t.function.name, json.loads(t.function.arguments)) for t in ch.message.tool_calls] == \
            [("get_weather", {"city": "Oslo", "unit": "celsius"})]
        if "mistral" in template:
            assert ch.message.tool_calls[0].id == "a1b2c3d4e", "the model's own id is kept"
        content, calls, finish = collect_stream(c.chat.completions.create(
            model=model, messages=msgs, tools=[WEATHER], max_tokens=200, temperature=0, stream=True, extra_body=body))
        assert finish == "tool_calls" and content.strip() == ""
        assert [(x["name"], json.loads(x["arguments"])) for x in calls] == [("get_weather", {"city": "Oslo", "unit": "celsius"})]
        # tool_choice none: the model is not shown the tools and its text stays text.
        r = c.chat.completions.create(model=model, messages=msgs, tools=[WEATHER], max_tokens=200, temperature=0,
                                      tool_choice="none", extra_body=body)
        assert r.choices[0].message.tool_calls is None and r.choices[0].message.content == output
        assert r.usage.prompt_tokens == plain["count"]
    finally:
        assert w.stop() == 0


def test_tool_results_are_accepted_back(qwen_worker):
    c = openai_client(qwen_worker)
    model = c.models.list().data[0].id
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
    ]
    t = qwen_worker.post("/tokenize", {"messages": history, "tools": [WEATHER]}).json()
    assert '<tool_response>\n{"temperature": 21}\n</tool_response>' in t["prompt"]
    assert '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}' in t["prompt"]
    r = c.chat.completions.create(model=model, messages=history, tools=[WEATHER], max_tokens=8, temperature=0,
                                  tool_choice="none")
    assert r.choices[0].finish_reason in ("stop", "length")


def test_tool_errors(qwen_worker, worker):
    c = openai_client(qwen_worker)
    model = c.models.list().data[0].id
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=model, messages=ASK, tools=[WEATHER],
                                  tool_choice={"type": "function", "function": {"name": "nope"}})
    assert e.value.body["param"] == "tool_choice" and "nope" in e.value.body["message"]
    default = openai_client(worker)
    with pytest.raises(openai.BadRequestError) as e:
        default.chat.completions.create(model=default.models.list().data[0].id, messages=ASK, tools=[WEATHER])
    assert e.value.body["param"] == "tools" and "tool support" in e.value.body["message"]
