"""Prompts as clients send them: special tokens in raw prompts, several prompts per request, the job API with
messages and token ids, ignore_eos / min_tokens / stop_token_ids, chat_template_kwargs, a continued assistant
message (prefill), /tokenize and /detokenize. Through the openai client where it has the route, else requests."""

CHATML = "<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n"


def tokenize(worker, **body):
    r = worker.post("/tokenize", body)
    assert r.status_code == 200, r.text
    return r.json()


def test_special_tokens_are_parsed_in_raw_prompts(model_id, worker, client):
    parsed = tokenize(worker, prompt=CHATML)
    plain = tokenize(worker, prompt=CHATML, parse_special=False)
    im_start = tokenize(worker, prompt="<|im_start|>", add_special_tokens=False)["tokens"]
    assert len(im_start) == 1, "<|im_start|> is one special token"
    assert parsed["tokens"].count(im_start[0]) == 2
    assert im_start[0] not in plain["tokens"] and plain["count"] > parsed["count"] + 8
    # A hand-written ChatML prompt (here: the one the chat template writes) gives the chat route's tokens and
    # answer, and reaches the model's end of turn.
    messages = [{"role": "user", "content": "Say hello."}]
    rendered = tokenize(worker, messages=messages)
    assert tokenize(worker, prompt=rendered["prompt"], add_special_tokens=False)["tokens"] == rendered["tokens"]
    chat = client.chat.completions.create(model=model_id, messages=messages, max_tokens=96, temperature=0)
    r = client.completions.create(model=model_id, prompt=rendered["prompt"], max_tokens=96, temperature=0)
    assert r.choices[0].text == chat.choices[0].message.content
    assert r.choices[0].finish_reason == chat.choices[0].finish_reason == "stop", r.choices[0].text
    r = client.completions.create(model=model_id, prompt=CHATML, max_tokens=4, temperature=0,
                                  extra_body={"parse_special": False})
    assert r.usage.prompt_tokens == plain["count"]


def test_several_prompts_in_one_request(model_id, client):
    prompts = ["The capital of France is", "The capital of Italy is"]
    alone = [client.completions.create(model=model_id, prompt=p, max_tokens=6, temperature=0).choices[0].text
             for p in prompts]
    r = client.completions.create(model=model_id, prompt=prompts, max_tokens=6, temperature=0)
    assert [c.index for c in r.choices] == [0, 1]
    assert [c.text for c in r.choices] == alone
    assert r.usage.completion_tokens == 12
    ids = client.completions.create(model=model_id, prompt=[[504, 3575, 282, 4649, 314]], max_tokens=3, temperature=0)
    assert ids.usage.prompt_tokens == 5
    streamed = {}
    for c in client.completions.create(model=model_id, prompt=prompts, max_tokens=6, temperature=0, stream=True):
        for ch in c.choices:
            streamed[ch.index] = streamed.get(ch.index, "") + ch.text
    assert [streamed[0], streamed[1]] == alone


def test_job_api_takes_messages_and_token_ids(model_id, worker, client):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    chat = client.chat.completions.create(model=model_id, messages=messages, max_tokens=16, temperature=0)
    r = worker.post("/v1/jobs", {"operation": "infer", "messages": messages, "max_tokens": 16, "temperature": 0,
                                 "stream": False})
    assert r.status_code == 200, r.text
    assert r.json()["text"] == chat.choices[0].message.content
    ids = tokenize(worker, prompt="The capital of France is")["tokens"]
    by_text = worker.post("/v1/jobs", {"operation": "infer", "prompt": "The capital of France is", "max_tokens": 8,
                                       "temperature": 0, "stream": False}).json()
    by_ids = worker.post("/v1/jobs", {"operation": "infer", "prompt": ids, "max_tokens": 8, "temperature": 0,
                                      "stream": False}).json()
    assert by_ids["text"] == by_text["text"] and by_ids["prompt_tokens"] == len(ids)


def test_ignore_eos_min_tokens_stop_token_ids(model_id, client, worker):
    messages = [{"role": "user", "content": "Say hi."}]
    short = client.chat.completions.create(model=model_id, messages=messages, max_tokens=64, temperature=0)
    assert short.choices[0].finish_reason == "stop" and short.usage.completion_tokens < 40
    long = client.chat.completions.create(model=model_id, messages=messages, max_tokens=40, temperature=0,
                                          extra_body={"ignore_eos": True})
    assert long.usage.completion_tokens == 40 and long.choices[0].finish_reason == "length"
    held = client.chat.completions.create(model=model_id, messages=messages, max_tokens=64, temperature=0,
                                          extra_body={"min_tokens": short.usage.completion_tokens + 5})
    assert held.usage.completion_tokens >= short.usage.completion_tokens + 5
    # Stop at the id of the answer's second token: the text is what the first token gave.
    answer_ids = tokenize(worker, prompt=short.choices[0].message.content, add_special_tokens=False)["tokens"]
    assert len(answer_ids) >= 2
    cut = client.chat.completions.create(model=model_id, messages=messages, max_tokens=64, temperature=0,
                                         extra_body={"stop_token_ids": [answer_ids[1]]})
    assert cut.choices[0].finish_reason == "stop"
    assert short.choices[0].message.content.startswith(cut.choices[0].message.content)
    assert len(cut.choices[0].message.content) < len(short.choices[0].message.content)


def test_continued_assistant_message(model_id, worker, client):
    messages = [{"role": "user", "content": "What is two plus two?"},
                {"role": "assistant", "content": "Two plus two equals"}]
    t = tokenize(worker, messages=messages)
    assert t["prompt"].endswith("Two plus two equals"), t["prompt"]
    opened = tokenize(worker, messages=messages, add_generation_prompt=True, continue_final_message=False)
    assert opened["prompt"].endswith("<|im_start|>assistant\n") and "equals<|im_end|>" in opened["prompt"]
    r = client.chat.completions.create(model=model_id, messages=messages, max_tokens=8, temperature=0)
    assert r.usage.prompt_tokens == t["count"]
    assert r.choices[0].message.content.strip(), "the continuation is empty"


def test_chat_template_kwargs_reach_the_template(worker):
    # SmolLM2's template writes its default system message unless the first message is a system one; a template
    # variable cannot change that, but an unknown one must be accepted and the render must stay the same.
    messages = [{"role": "user", "content": "Hi"}]
    a = tokenize(worker, messages=messages)
    b = tokenize(worker, messages=messages, chat_template_kwargs={"enable_thinking": False})
    assert a["tokens"] == b["tokens"]
    r = worker.post("/tokenize", {"messages": messages, "chat_template_kwargs": {"messages": []}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "chat_template_kwargs"


def test_tokenize_detokenize_round_trip(worker):
    text = "Bees make honey. <|im_end|>"
    t = tokenize(worker, prompt=text, return_token_strs=True)
    assert t["count"] == len(t["tokens"]) == len(t["token_strs"]) and t["max_model_len"] > 0
    d = worker.post("/detokenize", {"tokens": t["tokens"]})
    assert d.status_code == 200 and d.json()["prompt"] == text
    d = worker.post("/detokenize", {"tokens": t["tokens"], "skip_special_tokens": True})
    assert d.json()["prompt"] == "Bees make honey. "
    bad = worker.post("/detokenize", {"tokens": [1, 10**9]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens[1]"
