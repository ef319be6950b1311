"""Every invalid request gets a 4xx whose body names the field (docs/DESIGN.md section 5, Errors), and the worker keeps
serving afterwards."""
import base64

import pytest

from conftest import SIZE, b64png, encode_png

GOOD = {"operation": "image_generation", "prompt": "a cube", "width": SIZE, "height": SIZE, "steps": 2}
IMG = b64png(SIZE, SIZE, lambda x, y: (x % 256, y % 256, 0))
SMALL = b64png(SIZE, SIZE - 8, lambda x, y: (x % 256, y % 256, 0))
TRANSFORM = {**GOOD, "operation": "image_transform", "input_image": IMG, "strength": 0.5}
INPAINT = {**GOOD, "operation": "image_inpaint", "init_image": IMG, "mask_image": IMG}
NOT_PNG = base64.b64encode(b"GIF89a not a png at all").decode()
TRUNCATED = base64.b64encode(encode_png(SIZE, SIZE, lambda x, y: (1, 2, 3))[:200]).decode()

CASES = [
    # (body changes, status, field the error names, text in the message)
    ({"operation": None}, 400, "operation", "required"),
    ({"operation": "image_upscale"}, 400, "operation", "unknown operation"),
    ({"operation": 3}, 400, "operation", "must be a string"),
    ({"prompt": None}, 400, "prompt", "required"),
    ({"prompt": ["a"]}, 400, "prompt", "must be a string"),
    ({"prompt": "x" * 20000}, 400, "prompt", "at most"),
    ({"negative_prompt": 5}, 400, "negative_prompt", "must be a string"),
    ({"steps": 0}, 400, "steps", "[1, 150]"),
    ({"steps": 151}, 400, "steps", "[1, 150]"),
    ({"steps": 2.5}, 400, "steps", "whole number"),
    ({"steps": "20"}, 400, "steps", "must be an integer"),
    ({"guidance_scale": -0.5}, 400, "guidance_scale", "[0, 20]"),
    ({"guidance_scale": 20.5}, 400, "guidance_scale", "[0, 20]"),
    ({"guidance_scale": "high"}, 400, "guidance_scale", "must be a number"),
    ({"width": 260}, 400, "width", "multiple of 8"),
    ({"width": 248}, 400, "width", "[256, 2048]"),
    ({"height": 2056}, 400, "height", "[256, 2048]"),
    ({"height": 64}, 400, "height", "[256, 2048]"),
    ({"seed": -1}, 400, "seed", "must be in"),
    ({"seed": "abc"}, 400, "seed", "must be an integer"),
    ({"sampler": "k_lms"}, 400, "sampler", "unknown sampler"),
    # Limits only the model knows, checked before the job is queued (no 200 then a failed job).
    ({"sampler": "lcm", "steps": 60}, 400, "steps", "at most 50"),
    ({"noise": "philox"}, 400, "noise", "unknown generator"),
    ({"noise": 3}, 400, "noise", "must be a string"),
    ({"preview_every": 500}, 400, "preview_every", "[0, 150]"),
    ({**TRANSFORM, "strength": 1.5}, 400, "strength", "[0, 1]"),
    ({**TRANSFORM, "strength": -0.1}, 400, "strength", "[0, 1]"),
    ({**TRANSFORM, "strength": 0.1}, 400, "strength", "runs no denoising step"),
    ({**TRANSFORM, "input_image": None}, 400, "input_image", "required"),
    ({**TRANSFORM, "input_image": "@@@not base64@@@"}, 400, "input_image", "not valid base64"),
    ({**TRANSFORM, "input_image": NOT_PNG}, 400, "input_image", "signature"),
    ({**TRANSFORM, "input_image": TRUNCATED}, 400, "input_image", "not an image this worker can read"),
    ({**TRANSFORM, "input_image": SMALL}, 400, "input_image", f"is {SIZE}x{SIZE - 8}"),
    ({**TRANSFORM, "input_image": SMALL, "width": None, "height": None}, 400, "input_image", "multiple of 8"),
    ({**INPAINT, "mask_image": None}, 400, "mask_image", "required"),
    ({**INPAINT, "mask_image": SMALL}, 400, "mask_image", "the image is"),
    ({**INPAINT, "mask_image": NOT_PNG}, 400, "mask_image", "signature"),
]


def check_error(r, status, field, text):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"code", "message"}
    assert err["param"] == field, err
    assert field in err["message"] and text in err["message"], err["message"]


@pytest.mark.parametrize("change,status,field,text", CASES, ids=[f"{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_bad_job_request(sd_worker, change, status, field, text):
    body = {**GOOD, **change}
    body = {k: v for k, v in body.items() if v is not None}
    check_error(sd_worker.post("/v1/jobs", body), status, field, text)


OPENAI_CASES = [
    ({"prompt": None}, 400, "prompt", "required"),
    ({"n": 17}, 400, "n", "[1, 16]"),
    ({"n": 0}, 400, "n", "[1, 16]"),
    ({"size": "256"}, 400, "size", "<width>x<height>"),
    ({"size": "250x256"}, 400, "size", "multiple of 8"),
    ({"size": "4096x4096"}, 400, "size", "[256, 2048]"),
    ({"response_format": "url"}, 400, "response_format", "b64_json"),
    ({"steps": 0}, 400, "steps", "[1, 150]"),
    ({"sampler": "plms"}, 400, "sampler", "unknown sampler"),
    ({"sampler": "lcm", "steps": 51}, 400, "steps", "at most 50"),
]


@pytest.mark.parametrize("change,status,field,text", OPENAI_CASES, ids=[c[2] for c in OPENAI_CASES])
def test_bad_openai_request(sd_worker, change, status, field, text):
    body = {k: v for k, v in {"prompt": "a cube", "size": f"{SIZE}x{SIZE}", **change}.items() if v is not None}
    check_error(sd_worker.post("/v1/images/generations", body), status, field, text)


def test_malformed_bodies_and_routes(sd_worker):
    r = sd_worker.post("/v1/jobs", data=b"{not json", headers={**sd_worker.headers, "Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = sd_worker.post("/v1/jobs", [1, 2])
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
    r = sd_worker.get("/v1/jobs/img-doesnotexist/stream")
    assert r.status_code == 404 and r.json()["error"]["code"] == "job_not_found"
    r = sd_worker.delete("/v1/jobs/img-doesnotexist")
    assert r.status_code == 404
    r = sd_worker.get("/v1/nothing")
    assert r.status_code == 404 and "error" in r.json()


def test_still_serving_after_bad_requests(sd_worker):
    assert sd_worker.get("/health").status_code == 200
    events = sd_worker.run_job(seed=9)
    assert events[-2][0] == "complete"


def test_auth(sd_worker, token):
    import requests
    assert requests.get(sd_worker.url + "/health", timeout=10).status_code == 200
    for method, path in [("get", "/info"), ("get", "/ready"), ("get", "/metrics"), ("post", "/v1/jobs"),
                         ("post", "/v1/images/generations"), ("delete", "/v1/jobs/img-x")]:
        r = getattr(requests, method)(sd_worker.url + path, timeout=10)
        assert r.status_code == 401, (path, r.status_code)
        assert r.headers.get("WWW-Authenticate") == "Bearer"
        r = getattr(requests, method)(sd_worker.url + path, headers={"Authorization": "Bearer wrong"}, timeout=10)
        assert r.status_code == 401
    assert sd_worker.get("/info").status_code == 200
