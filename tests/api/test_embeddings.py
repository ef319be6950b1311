"""POST /v1/embeddings through the openai client: strings and lists, float and base64, dimensions, token ids.
That the vectors are the model's pooled hidden states is checked in C++ (tests/server/test_scheduler_choices.cpp,
against a direct forward pass)."""
import base64
import math
import struct

import openai
import pytest


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def test_one_and_many(client, model_id, worker):
    texts = ["Bees make honey.", "The stock market fell sharply today.", "Bees make honey."]
    one = client.embeddings.create(model=model_id, input=texts[0])
    assert len(one.data) == 1 and one.data[0].index == 0
    v = one.data[0].embedding
    assert len(v) == 576, "SmolLM2-135M's hidden size"
    assert abs(norm(v) - 1.0) < 1e-4
    many = client.embeddings.create(model=model_id, input=texts)
    assert [d.index for d in many.data] == [0, 1, 2]
    a, b, c = (d.embedding for d in many.data)
    assert max(abs(x - y) for x, y in zip(a, v)) < 1e-5, "batched equals alone"
    assert a == c and a != b
    n_tokens = sum(worker.post("/tokenize", {"prompt": t}).json()["count"] for t in texts)
    assert many.usage.prompt_tokens == many.usage.total_tokens == n_tokens


def test_base64_and_ids(client, model_id, worker):
    f = client.embeddings.create(model=model_id, input="Hello there", encoding_format="float").data[0].embedding
    raw = worker.post("/v1/embeddings", {"input": "Hello there", "encoding_format": "base64"}).json()
    b = raw["data"][0]["embedding"]
    assert isinstance(b, str)
    decoded = struct.unpack(f"<{len(f)}f", base64.b64decode(b))
    assert list(decoded) == pytest.approx(f, abs=1e-7)
    ids = worker.post("/tokenize", {"prompt": "Hello there"}).json()["tokens"]
    by_ids = client.embeddings.create(model=model_id, input=[ids]).data[0].embedding
    assert by_ids == pytest.approx(f, abs=1e-6)


def test_dimensions(client, model_id):
    full = client.embeddings.create(model=model_id, input="x", dimensions=576).data[0].embedding
    assert len(full) == 576
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=model_id, input="x", dimensions=64)
    assert e.value.body["param"] == "dimensions"
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=model_id, input=["ok", ""])
    assert e.value.body["param"] == "input[1]"
