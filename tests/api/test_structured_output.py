"""Structured output through the openai client: response_format json_schema (strict) on 20 schemas (nested
objects, arrays, enums, numbers with bounds, strings with patterns and formats, $ref, anyOf), sampled at
temperature 0.8 so that the model really chooses: every output must parse and validate (jsonschema). Also
json_object, streaming, and the job API's grammar / json_schema fields."""
import json

import openai
import pytest

from conftest import openai_client, sse_events

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (tools/requirements-test.txt)")

S = {"type": "string", "maxLength": 24}

SCHEMAS = [
    {"type": "object", "properties": {"name": S, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"],
     "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "minimum": -50, "maximum": 50}, "minItems": 2, "maxItems": 6},
    {"type": "object", "properties": {"city": S, "population": {"type": "integer", "minimum": 0},
                                      "coords": {"type": "object", "properties": {
                                          "lat": {"type": "number", "minimum": -90, "maximum": 90},
                                          "lon": {"type": "number", "minimum": -180, "maximum": 180}},
                                          "required": ["lat", "lon"], "additionalProperties": False}},
     "required": ["city", "coords"], "additionalProperties": False},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}},
     "required": ["code"], "additionalProperties": False},
    {"type": "object", "properties": {"date": {"type": "string", "format": "date"},
                                      "ok": {"type": "boolean"}}, "required": ["date", "ok"],
     "additionalProperties": False},
    {"type": "object", "properties": {"tags": {"type": "array", "items": S, "maxItems": 4},
                                      "score": {"type": "number", "minimum": 0, "maximum": 1}},
     "required": ["tags", "score"], "additionalProperties": False},
    {"type": "object", "properties": {"answer": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
     "required": ["answer"], "additionalProperties": False},
    {"type": "object", "properties": {"user": {"$ref": "#/$defs/person"}, "friends": {
        "type": "array", "items": {"$ref": "#/$defs/person"}, "maxItems": 3}},
     "required": ["user", "friends"], "additionalProperties": False,
     "$defs": {"person": {"type": "object", "properties": {"name": S, "email": {
         "type": "string", "pattern": "^[a-z]{1,8}@[a-z]{1,8}\\.(com|org)$"}}, "required": ["name", "email"],
         "additionalProperties": False}}},
    {"type": "object", "properties": {"step": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
                                      "label": {"type": "string", "minLength": 1, "maxLength": 8}},
     "required": ["step", "label"], "additionalProperties": False},
    {"type": "object", "properties": {"matrix": {"type": "array", "maxItems": 3, "items": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer", "minimum": 0, "maximum": 9}}}},
     "required": ["matrix"], "additionalProperties": False},
    {"type": "object", "properties": {"status": {"const": "ok"}, "items": {"type": "integer", "minimum": 0,
                                                                          "maximum": 1000}},
     "required": ["status", "items"], "additionalProperties": False},
    {"type": "object", "properties": {"title": S, "rating": {"type": "integer", "minimum": 1, "maximum": 5},
                                      "genre": {"enum": ["drama", "comedy", "horror", "sci-fi"]},
                                      "year": {"type": "integer", "minimum": 1900, "maximum": 2030}},
     "required": ["title", "rating", "genre", "year"], "additionalProperties": False},
    {"type": "object", "properties": {"hex": {"type": "string", "pattern": "^#[0-9a-f]{6}$"}},
     "required": ["hex"], "additionalProperties": False},
    {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}}, "required": ["id"],
     "additionalProperties": False},
    {"type": "array", "prefixItems": [{"type": "string", "maxLength": 10}, {"type": "number"},
                                      {"type": "boolean"}], "items": False, "minItems": 3},
    {"type": "object", "properties": {"temperature": {"type": "number", "minimum": -273},
                                      "unit": {"enum": ["C", "F", "K"]}, "note": {"type": ["string", "null"],
                                                                                   "maxLength": 20}},
     "required": ["temperature", "unit", "note"], "additionalProperties": False},
    {"type": "object", "properties": {"order": {"type": "object", "properties": {
        "lines": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "object", "properties": {
            "sku": {"type": "string", "pattern": "^SKU[0-9]{4}$"}, "qty": {"type": "integer", "minimum": 1,
                                                                         "maximum": 99}},
            "required": ["sku", "qty"], "additionalProperties": False}},
        "express": {"type": "boolean"}}, "required": ["lines", "express"], "additionalProperties": False}},
     "required": ["order"], "additionalProperties": False},
    {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"}},
     "required": ["when"], "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": -5, "maximum": 5},
                                      "b": {"oneOf": [{"type": "string", "maxLength": 5}, {"type": "boolean"}]},
                                      "c": {"type": "array", "items": {"enum": [1, 2, 3]}, "maxItems": 5}},
     "required": ["a", "b", "c"], "additionalProperties": False},
]


@pytest.fixture(scope="module")
def client(worker):
    return openai_client(worker, timeout=300)


def test_twenty_schemas_always_validate(client, model_id):
    assert len(SCHEMAS) == 20
    failures = []
    for i, schema in enumerate(SCHEMAS):
        jsonschema.Draft202012Validator.check_schema(schema)
        msgs = [{"role": "system", "content": "Answer in JSON."},
                {"role": "user", "content": "Make up an example that fits this schema: " + json.dumps(schema)}]
        fmt = {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}}
        stream = i % 4 == 3
        if stream:
            text, finish = "", None
            for c in client.chat.completions.create(model=model_id, messages=msgs, response_format=fmt,
                                                    max_tokens=400, temperature=0.8, seed=i, stream=True):
                if c.choices:
                    text += c.choices[0].delta.content or ""
                    finish = c.choices[0].finish_reason or finish
        else:
            r = client.chat.completions.create(model=model_id, messages=msgs, response_format=fmt, max_tokens=400,
                                               temperature=0.8, seed=i)
            text, finish = r.choices[0].message.content, r.choices[0].finish_reason
        try:
            assert finish == "stop", f"finish_reason {finish}"
            jsonschema.validate(json.loads(text), schema)
        except Exception as e:  # noqa: BLE001 (collect every failure, then report them together)
            failures.append(f"schema {i}: {e}\n  output: {text!r}")
    assert not failures, "\n".join(failures)


def test_json_object(client, model_id):
    msgs = [{"role": "user", "content": "Describe a cat as JSON."}]
    for seed in range(3):
        r = client.chat.completions.create(model=model_id, messages=msgs, response_format={"type": "json_object"},
                                           max_tokens=300, temperature=0.7, seed=seed)
        if r.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(r.choices[0].message.content), dict)
        else:
            # A long free-form object can run out of tokens; what came is still the start of an object.
            assert r.choices[0].message.content.startswith("{")


def test_completions_and_jobs_take_grammars(client, model_id, worker):
    r = client.completions.create(model=model_id, prompt="The answer is", max_tokens=20, temperature=1.0, seed=3,
                                  extra_body={"grammar": 'root ::= ("yes" | "no") "."'})
    assert r.choices[0].text in ("yes.", "no.") and r.choices[0].finish_reason == "stop"
    j = worker.post("/v1/jobs", {"operation": "infer", "prompt": "Pick a number:", "max_tokens": 20, "stream": False,
                                 "json_schema": {"type": "integer", "minimum": 10, "maximum": 20}}).json()
    assert 10 <= int(j["text"]) <= 20, j
    job = worker.post("/v1/jobs", {"operation": "infer", "prompt": "Colors:", "max_tokens": 30, "temperature": 0.9,
                                   "grammar": 'root ::= "[" color ("," color){0,3} "]"\ncolor ::= "red" | "blue"'}).json()
    with worker.get(job["sse_url"], stream=True) as s:
        text = "".join(e["t"] for e in sse_events(s) if isinstance(e, dict) and e["type"] == "token")
    assert set(json.loads(text.replace("red", '"red"').replace("blue", '"blue"'))) <= {"red", "blue"}


def test_bad_schemas_are_400(client, model_id):
    cases = [({"type": "object", "properties": {"x": {"type": "integer", "multipleOf": 3}}}, "multipleOf"),
             ({"$ref": "#/$defs/nowhere"}, "points nowhere"),
             ({"type": "string", "pattern": "(?!x)"}, "lookaround")]
    for schema, needle in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "x"}],
                                           response_format={"type": "json_schema",
                                                            "json_schema": {"name": "s", "schema": schema}})
        assert e.value.body["param"] == "response_format" and needle in e.value.body["message"]
