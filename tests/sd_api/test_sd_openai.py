"""OpenAI's images API through the official openai client (b64_json), with the rbee extensions."""
import base64

import openai
import pytest

from conftest import SIZE, decode_png


@pytest.fixture()
def client(sd_worker, token):
    return openai.OpenAI(base_url=sd_worker.url + "/v1", api_key=token, max_retries=0, timeout=120)


def test_images_generate_b64(client, sd_worker):
    out = client.images.generate(prompt="a green sphere", size=f"{SIZE}x{SIZE}", response_format="b64_json", n=1,
                                 extra_body={"steps": 1, "seed": 11, "guidance_scale": 0})
    assert len(out.data) == 1 and out.created > 0
    png = base64.b64decode(out.data[0].b64_json)
    w, h, rgb, text = decode_png(png)
    assert (w, h) == (SIZE, SIZE) and "Seed: 11" in text["parameters"] and "Steps: 1" in text["parameters"]
    # The same request through the job API gives the same bytes.
    events = sd_worker.run_job(prompt="a green sphere", seed=11)
    assert base64.b64decode(events[-2][1]["image"]) == png


def test_images_generate_n(client):
    """n images are one batch: image i has seed + i and the pixels of the n = 1 image of that seed (the batched
    UNet may differ in the last bits of its sums, so a pixel may move by a level or two)."""
    extra = {"steps": 1, "seed": 11, "guidance_scale": 0}
    out = client.images.generate(prompt="a green sphere", size=f"{SIZE}x{SIZE}", response_format="b64_json", n=2,
                                 extra_body=extra)
    assert len(out.data) == 2
    assert [d.model_extra["seed"] for d in out.data] == [11, 12]
    pixels = []
    for i, d in enumerate(out.data):
        w, h, rgb, text = decode_png(base64.b64decode(d.b64_json))
        assert (w, h) == (SIZE, SIZE) and f"Seed: {11 + i}" in text["parameters"]
        single = client.images.generate(prompt="a green sphere", size=f"{SIZE}x{SIZE}", response_format="b64_json",
                                        n=1, extra_body={**extra, "seed": 11 + i})
        _, _, want, _ = decode_png(base64.b64decode(single.data[0].b64_json))
        assert len(rgb) == len(want) and max(abs(a - b) for a, b in zip(rgb, want)) <= 2
        pixels.append(rgb)
    assert pixels[0] != pixels[1]


def test_openai_errors(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.images.generate(prompt="x", size=f"{SIZE}x{SIZE}", n=17)
    assert "'n'" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.images.generate(prompt="x", size=f"{SIZE}x{SIZE}", response_format="url")
    assert "response_format" in str(e.value)
    bad = openai.OpenAI(base_url=client.base_url, api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.images.generate(prompt="x", size=f"{SIZE}x{SIZE}")
