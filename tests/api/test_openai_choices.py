"""n > 1: several choices for one prompt, the prompt evaluated once (its KV blocks shared), streamed and not."""
import openai
import pytest


def test_greedy_choices_are_identical_and_share_the_prompt(model_id, client, worker):
    prompt = "The three primary colors are"
    before = worker.metric("rbee_prompt_tokens_evaluated_total")
    r = client.completions.create(model=model_id, prompt=prompt, max_tokens=12, temperature=0, n=4)
    after = worker.metric("rbee_prompt_tokens_evaluated_total")
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert len({c.text for c in r.choices}) == 1
    assert r.usage.prompt_tokens == after - before, "the prompt must be evaluated once for the four choices"
    assert r.usage.completion_tokens == sum(12 if c.finish_reason == "length" else 0 for c in r.choices) or \
        r.usage.completion_tokens >= 4
    one = client.completions.create(model=model_id, prompt=prompt, max_tokens=12, temperature=0)
    assert r.choices[0].text == one.choices[0].text


def test_sampled_chat_choices(model_id, client):
    msgs = [{"role": "user", "content": "Tell me a one-line joke."}]
    r = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=16, temperature=1.0, seed=5, n=3)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert len({c.message.content for c in r.choices}) > 1, "three seeded choices were all the same"
    again = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=16, temperature=1.0, seed=5, n=3)
    assert [c.message.content for c in again.choices] == [c.message.content for c in r.choices]
    streamed = {}
    finishes = {}
    for c in client.chat.completions.create(model=model_id, messages=msgs, max_tokens=16, temperature=1.0, seed=5, n=3,
                                            stream=True, stream_options={"include_usage": True}):
        for ch in c.choices:
            streamed[ch.index] = streamed.get(ch.index, "") + (ch.delta.content or "")
            if ch.finish_reason:
                finishes[ch.index] = ch.finish_reason
        if c.usage:
            assert c.usage.completion_tokens == again.usage.completion_tokens
    assert [streamed[i] for i in range(3)] == [c.message.content for c in r.choices]
    assert sorted(finishes) == [0, 1, 2]


def test_n_beyond_the_slots_is_a_400(model_id, client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model_id, prompt="x", max_tokens=2, n=100)
    assert e.value.body["param"] == "n"
