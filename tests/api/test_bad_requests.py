"""Bad requests each get their 4xx naming the field, and the worker keeps serving afterwards."""
import json
import socket

import pytest
import requests

JOB = "/v1/jobs"
COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"

# (name, method, path, raw body bytes or JSON-able, expected status, expected error code or None, field or None)
CASES = [
    ("malformed JSON", "POST", JOB, b'{"operation":"infer","prompt":', 400, "invalid_json", None),
    ("not an object", "POST", JOB, b"[1,2,3]", 400, "invalid_request", None),
    ("empty body", "POST", JOB, b"", 400, "invalid_json", None),
    ("unknown operation", "POST", JOB, {"operation": "dance", "prompt": "x"}, 400, "unknown_operation", "operation"),
    ("missing operation", "POST", JOB, {"prompt": "x"}, 400, "invalid_request", "operation"),
    ("missing prompt", "POST", JOB, {"operation": "infer", "max_tokens": 4}, 400, "invalid_request", "prompt"),
    ("prompt wrong type", "POST", JOB, {"operation": "infer", "prompt": ["x"]}, 400, "invalid_request", "prompt"),
    ("max_tokens wrong type", "POST", JOB, {"operation": "infer", "prompt": "x", "max_tokens": "5"}, 400,
     "invalid_request", "max_tokens"),
    ("negative max_tokens", "POST", JOB, {"operation": "infer", "prompt": "x", "max_tokens": -5}, 400,
     "invalid_request", "max_tokens"),
    ("huge max_tokens", "POST", JOB, {"operation": "infer", "prompt": "x", "max_tokens": 10**15}, 400,
     "invalid_request", "max_tokens"),
    ("max_tokens beyond context", "POST", JOB, {"operation": "infer", "prompt": "x", "max_tokens": 500000}, 400,
     "invalid_request", "max_tokens"),
    ("temperature NaN-like", "POST", JOB, {"operation": "infer", "prompt": "x", "temperature": "hot"}, 400,
     "invalid_request", "temperature"),
    ("negative temperature", "POST", JOB, {"operation": "infer", "prompt": "x", "temperature": -1}, 400,
     "invalid_request", "temperature"),
    ("stop wrong type", "POST", JOB, {"operation": "infer", "prompt": "x", "stop": 7}, 400, "invalid_request", "stop"),
    ("invalid UTF-8", "POST", JOB, b'{"operation":"infer","prompt":"\xff\xfe bad"}', 400, "invalid_json", None),
    ("deep nesting", "POST", JOB, b"[" * 100000 + b"]" * 100000, 400, "invalid_request", None),
    ("n 0", "POST", COMPLETIONS, {"prompt": "x", "n": 0}, 400, "invalid_request", "n"),
    ("n beyond the slots", "POST", COMPLETIONS, {"prompt": "x", "n": 64}, 400, "invalid_request", "n"),
    ("top_logprobs 21", "POST", CHAT, {"messages": [{"role": "user", "content": "x"}], "logprobs": True,
                                       "top_logprobs": 21}, 400, "invalid_request", "top_logprobs"),
    ("completion logprobs 21", "POST", COMPLETIONS, {"prompt": "x", "logprobs": 21}, 400, "invalid_request",
     "logprobs"),
    ("max_tokens 0 without echo", "POST", COMPLETIONS, {"prompt": "x", "max_tokens": 0}, 400, "invalid_request",
     "max_tokens"),
    ("stop_token_ids out of vocab", "POST", COMPLETIONS, {"prompt": "x", "stop_token_ids": [10**8]}, 400,
     "invalid_request", "stop_token_ids[0]"),
    ("job messages and prompt", "POST", JOB, {"operation": "infer", "prompt": "x",
                                              "messages": [{"role": "user", "content": "y"}]}, 400,
     "invalid_request", "messages"),
    ("prefill of a user message", "POST", CHAT, {"messages": [{"role": "user", "content": "x"}],
                                                 "continue_final_message": True}, 400, "invalid_request", "messages"),
    ("tokenize without prompt", "POST", "/tokenize", {}, 400, "invalid_request", "prompt"),
    ("detokenize bad ids", "POST", "/detokenize", {"tokens": "abc"}, 400, "invalid_request", "tokens"),
    ("completion without prompt", "POST", COMPLETIONS, {"max_tokens": 3}, 400, "invalid_request", "prompt"),
    ("token id out of vocab", "POST", COMPLETIONS, {"prompt": [1, 2, 99999999]}, 400, "invalid_request", "prompt[2]"),
    ("logit_bias id out of vocab", "POST", COMPLETIONS, {"prompt": "x", "logit_bias": {"999999": 5}}, 400,
     "invalid_request", "logit_bias"),
    ("unknown model", "POST", COMPLETIONS, {"model": "other", "prompt": "x"}, 404, "model_not_found", "model"),
    ("chat bad role", "POST", CHAT, {"messages": [{"role": "robot", "content": "x"}]}, 400, "invalid_request",
     "messages[0].role"),
    ("chat no messages", "POST", CHAT, {"messages": []}, 400, "invalid_request", "messages"),
    ("chat tool without function", "POST", CHAT, {"messages": [{"role": "user", "content": "x"}], "tools": [{}]}, 400,
     "invalid_request", "tools[0].function"),
    ("tools on a template without tools", "POST", CHAT, {"messages": [{"role": "user", "content": "x"}],
                                                         "tools": [{"type": "function", "function": {"name": "f"}}]},
     400, "unsupported", "tools"),
    ("unknown tool_choice function", "POST", CHAT, {"messages": [{"role": "user", "content": "x"}],
                                                    "tools": [{"type": "function", "function": {"name": "f"}}],
                                                    "tool_choice": {"type": "function", "function": {"name": "g"}}},
     400, "invalid_request", "tool_choice"),
    ("tool_choice word", "POST", CHAT, {"messages": [{"role": "user", "content": "x"}],
                                        "tools": [{"type": "function", "function": {"name": "f"}}],
                                        "tool_choice": "always"}, 400, "invalid_request", "tool_choice"),
    ("invalid schema", "POST", CHAT, {"messages": [{"role": "user", "content": "x"}],
                                      "response_format": {"type": "json_schema", "json_schema": {
                                          "name": "s", "schema": {"type": "integer", "multipleOf": 2}}}}, 400,
     "invalid_request", "response_format"),
    ("schema not an object", "POST", CHAT, {"messages": [{"role": "user", "content": "x"}],
                                            "response_format": {"type": "json_schema",
                                                                "json_schema": {"name": "s", "schema": 5}}}, 400,
     "invalid_request", "response_format"),
    ("response_format type", "POST", CHAT, {"messages": [{"role": "user", "content": "x"}],
                                            "response_format": {"type": "xml"}}, 400, "invalid_request",
     "response_format"),
    ("grammar syntax", "POST", JOB, {"operation": "infer", "prompt": "x", "grammar": "root ::= (\"a\""}, 400,
     "invalid_request", "grammar"),
    ("grammar and schema", "POST", JOB, {"operation": "infer", "prompt": "x", "grammar": "root ::= \"a\"",
                                         "json_schema": {"type": "integer"}}, 400, "invalid_request", "grammar"),
    ("embeddings without input", "POST", "/v1/embeddings", {"model": "x"}, 400, "invalid_request", "input"),
    ("embeddings encoding", "POST", "/v1/embeddings", {"input": "x", "encoding_format": "hex"}, 400,
     "invalid_request", "encoding_format"),
    ("embeddings dimensions", "POST", "/v1/embeddings", {"input": "x", "dimensions": 8}, 400, "invalid_request",
     "dimensions"),
    ("unknown job stream", "GET", "/v1/jobs/job-doesnotexist/stream", None, 404, "job_not_found", "id"),
    ("unknown job delete", "DELETE", "/v1/jobs/job-doesnotexist", None, 404, "job_not_found", "id"),
    ("bad job id characters", "GET", "/v1/jobs/..%2F..%2Fetc/stream", None, 404, "not_found", None),
    ("unknown route", "GET", "/v2/everything", None, 404, "not_found", None),
]


@pytest.mark.parametrize("name,method,path,body,status,code,field", CASES, ids=[c[0] for c in CASES])
def test_bad_request(worker, name, method, path, body, status, code, field):
    headers = dict(worker.headers)
    data = None
    if isinstance(body, bytes):
        data = body
        headers["Content-Type"] = "application/json"
    elif body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    r = requests.request(method, worker.url + path, data=data, headers=headers, timeout=60)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["message"]
    if code:
        assert err["code"] == code, err
    if field:
        assert err["param"] == field, err
        assert field in err["message"], err


def test_huge_body_is_413(worker):
    r = requests.post(worker.url + JOB, data=b'{"operation":"infer","prompt":"' + b"a" * (2 << 20) + b'"}',
                      headers={**worker.headers, "Content-Type": "application/json"}, timeout=60)
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "payload_too_large"


def test_bad_token_is_401(worker):
    r = requests.post(worker.url + JOB, json={"operation": "infer", "prompt": "x"},
                      headers={"Authorization": "Bearer not-the-token"}, timeout=10)
    assert r.status_code == 401
    r = requests.post(worker.url + JOB, json={"operation": "infer", "prompt": "x"},
                      headers={"Authorization": "Basic dXNlcjpwYXNz"}, timeout=10)
    assert r.status_code == 401


def test_garbage_on_the_socket(worker):
    port = int(worker.url.rsplit(":", 1)[1])
    for junk in (b"\x00\x01\x02garbage\r\n\r\n", b"GET / HTTP/9.9\r\n" + b"X: " + b"y" * 20000 + b"\r\n\r\n",
                 b"POST /v1/jobs HTTP/1.1\r\nContent-Length: -5\r\n\r\n", b"GET " + b"/a" * 10000 + b" HTTP/1.1\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(junk)
            try:
                s.recv(4096)
            except (ConnectionResetError, socket.timeout):
                pass


def test_still_serving_after_everything(worker):
    assert requests.get(worker.url + "/health", timeout=10).json() == {"status": "healthy"}
    r = worker.post(COMPLETIONS, {"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
    text = worker.get("/metrics").text
    assert 'status="400"' in text and 'status="404"' in text and 'status="401"' in text
