"""The rbee job contract of sd-worker-rbee (docs/DESIGN.md section 5): SSE named events in order with every field,
previews, the PNG and its parameters chunk, seeds, img2img and inpaint, /info, /metrics."""
import base64
import re

from conftest import SIZE, b64png, decode_png, named_events


def png_of(data):
    assert data["format"] == "png"
    return base64.b64decode(data["image"], validate=True)


def test_event_order_and_fields(sd_worker):
    events = sd_worker.run_job(prompt="a red cube", negative_prompt="blurry", steps=3, seed=7, guidance_scale=6.5,
                               sampler="euler_a", preview_every=1)
    names = [n for n, _ in events]
    # progress after every step; a preview after every step (preview_every 1) but the last; then complete.
    assert names == ["progress", "preview", "progress", "preview", "progress", "complete", "message"], names
    progress = [d for n, d in events if n == "progress"]
    assert [(p["step"], p["total"]) for p in progress] == [(1, 3), (2, 3), (3, 3)]
    assert [round(p["percent"], 3) for p in progress] == [33.333, 66.667, 100.0]
    previews = [d for n, d in events if n == "preview"]
    assert [(p["step"], p["total"]) for p in previews] == [(1, 3), (2, 3)]
    for p in previews:
        w, h, rgb, _ = decode_png(png_of(p))
        assert (w, h) == (SIZE, SIZE) and len(set(rgb)) > 10
    complete = events[-2][1]
    assert set(complete) >= {"image", "format", "seed"}
    assert complete["seed"] == 7 and complete["width"] == SIZE and complete["height"] == SIZE
    assert complete["seconds"] > 0
    w, h, rgb, text = decode_png(png_of(complete))
    assert (w, h) == (SIZE, SIZE)
    assert len(set(rgb)) > 10, "the image is flat"
    params = text["parameters"]
    assert params.startswith("a red cube\nNegative prompt: blurry\n")
    for part in ["Steps: 3", "Sampler: euler_a", "CFG scale: 6.5", "Seed: 7", f"Size: {SIZE}x{SIZE}",
                 "Model: test:tiny-sd15"]:
        assert part in params, params
    assert events[-1] == ("message", "[DONE]")


def test_seeds(sd_worker):
    """A drawn seed is reported and reproduces the image byte for byte; another seed gives another image."""
    job = sd_worker.job()
    assert isinstance(job["seed"], int) and job["seed"] >= 0
    with sd_worker.stream(job) as r:
        events = list(named_events(r))
    assert events[-2][1]["seed"] == job["seed"]
    again = sd_worker.run_job(seed=job["seed"])
    assert png_of(again[-2][1]) == png_of(events[-2][1])
    other = sd_worker.run_job(seed=(job["seed"] + 1) % 2**63)
    assert decode_png(png_of(other[-2][1]))[2] != decode_png(png_of(events[-2][1]))[2]


def gradient(x, y):
    return ((x * 3) % 256, (y * 5) % 256, ((x + y) * 2) % 256)


def test_image_transform_runs_strength_share_of_steps(sd_worker):
    src = b64png(SIZE, SIZE, gradient, filters=(0, 1, 2, 3, 4))
    # Width and height default to the input image's.
    events = sd_worker.run_job(operation="image_transform", input_image=src, strength=0.5, steps=3, seed=3,
                               width=None, height=None, preview_every=0)
    progress = [d for n, d in events if n == "progress"]
    assert [(p["step"], p["total"]) for p in progress] == [(1, 1)]  # int(3 * 0.5) steps run
    assert events[-2][0] == "complete"
    w, h, rgb, text = decode_png(png_of(events[-2][1]))
    assert (w, h) == (SIZE, SIZE) and "Denoising strength: 0.5" in text["parameters"]


def test_image_inpaint(sd_worker):
    src = b64png(SIZE, SIZE, gradient)
    mask = b64png(SIZE, SIZE, lambda x, y: (255, 255, 255) if x >= SIZE // 2 else (0, 0, 0))
    events = sd_worker.run_job(operation="image_inpaint", init_image=src, mask_image=mask, strength=1.0, seed=5)
    assert events[-2][0] == "complete", events[-2]
    w, h, _, text = decode_png(png_of(events[-2][1]))
    assert (w, h) == (SIZE, SIZE) and "Inpaint: true" in text["parameters"]


def test_inpaint_default_strength_runs_every_step(sd_worker):
    """image_inpaint without strength uses diffusers' inpaint default, 1.0: every step runs."""
    src = b64png(SIZE, SIZE, gradient)
    mask = b64png(SIZE, SIZE, lambda x, y: (255, 255, 255) if y >= SIZE // 2 else (0, 0, 0))
    events = sd_worker.run_job(operation="image_inpaint", init_image=src, mask_image=mask, steps=3, seed=6,
                               preview_every=0)
    progress = [d for n, d in events if n == "progress"]
    assert [(p["step"], p["total"]) for p in progress] == [(1, 3), (2, 3), (3, 3)]
    assert "Denoising strength: 1" in decode_png(png_of(events[-2][1]))[3]["parameters"]


def test_odd_sides_run(sd_worker):
    """Sides that are multiples of 8 but not of the UNet's 4 x 2^2 (tiny pipeline: 264 -> latent 66) make an image
    of that size, as diffusers does."""
    events = sd_worker.run_job(seed=4, width=264, height=256)
    assert events[-2][0] == "complete", events[-2]
    w, h, _, _ = decode_png(png_of(events[-2][1]))
    assert (w, h) == (264, 256)


def test_torch_noise_is_reproducible(sd_worker):
    """"noise": "torch" (PyTorch's generator) gives another image than rbee's for the same seed, the same one again,
    and says so in the parameters chunk."""
    a = png_of(sd_worker.run_job(seed=11, noise="torch")[-2][1])
    b = png_of(sd_worker.run_job(seed=11, noise="torch")[-2][1])
    c = png_of(sd_worker.run_job(seed=11)[-2][1])
    assert a == b and decode_png(a)[2] != decode_png(c)[2]
    assert "Noise: torch" in decode_png(a)[3]["parameters"]


def test_info_health_ready(sd_worker):
    assert sd_worker.get("/health", headers={}).json() == {"status": "healthy"}
    assert sd_worker.get("/ready").json() == {"ready": True}
    info = sd_worker.get("/info").json()
    assert info["implementation"] == "rbee" and info["model_ref"] == "test:tiny-sd15"
    # --sd-version auto (the default) reports the family read from the files.
    assert info["sd_version"] == "v1-5" and info["sd_version_requested"] == "auto" and info["backend"] == "cpu"
    assert "dpmpp_2m" in info["samplers"] and info["defaults"]["noise"] == "rbee"
    assert set(info["device"]) == {"id", "name", "vendor", "arch", "vram_total", "vram_used"}
    assert info["device"]["vram_total"] > 0
    assert info["queue"]["max_queued"] == 2
    assert info["defaults"]["steps"] == 20 and info["defaults"]["preview_every"] == 2
    assert info["defaults"]["strength"] == 0.8 and info["defaults"]["inpaint_strength"] == 1.0


def test_metrics(sd_worker):
    before = sd_worker.metric("rbee_images_total")
    steps_before = sd_worker.metric("rbee_step_seconds_count")
    sd_worker.run_job(seed=1)
    text = sd_worker.get("/metrics").text
    assert sd_worker.metric("rbee_images_total") == before + 1
    assert sd_worker.metric("rbee_step_seconds_count") == steps_before + 1
    assert re.search(r'^rbee_jobs_total\{operation="image_generation",outcome="complete"\} \d+', text, re.M)
    for family in ["rbee_queue_depth", "rbee_running_jobs", "rbee_image_seconds_bucket", "rbee_vram_used_bytes",
                   "rbee_vram_total_bytes", "rbee_http_requests_total", "rbee_queue_seconds_count"]:
        assert re.search(rf"^{family}", text, re.M), family
