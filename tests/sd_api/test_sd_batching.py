"""Queued text-to-image jobs of one size, steps, sampler, guidance and noise run as one UNet batch
(--batch-images), and each job's image is byte for byte the one it makes alone (CPU backend)."""
import threading

from conftest import SdWorker, named_events
from test_sd_jobs import png_of

# Two steps with guidance and an ancestral sampler: the batch carries CFG rows and per-image step noise.
COMMON = dict(steps=2, guidance_scale=5.0, sampler="euler_a")
JOBS = [dict(prompt="a red cube", seed=3), dict(prompt="a blue sphere", negative_prompt="blurry", seed=4),
        dict(prompt="a green cone", seed=5)]


def final_png(worker, job):
    with worker.stream(job) as r:
        events = list(named_events(r))
    assert events[-2][0] == "complete", events[-2]
    return png_of(events[-2][1])


def test_queued_jobs_batch_and_match_their_solo_images():
    w = SdWorker("--queue-size", "8", "--batch-images", "4", "--preview-every", "0")
    try:
        # A blocker holds the device (more steps) while the three jobs queue behind it: they start as one batch.
        batch_before = w.metric("rbee_batch_jobs_count")
        blocker = w.job(prompt="blocker", steps=4, seed=1)
        jobs = [w.job(**COMMON, **j) for j in JOBS]
        # Another size never joins them (it waits for its own turn).
        other = w.job(**dict(COMMON, width=264, height=256), prompt="a red cube", seed=3)
        results = {}

        def read(i, job):
            results[i] = final_png(w, job)

        readers = [threading.Thread(target=read, args=(i, j)) for i, j in enumerate(jobs + [other])]
        for t in readers:
            t.start()
        final_png(w, blocker)
        for t in readers:
            t.join(120)
        assert len(results) == 4
        # blocker alone, the three together, the other size alone: 3 batches, 5 jobs.
        assert w.metric("rbee_batch_jobs_count") == batch_before + 3
        assert w.metric("rbee_batch_jobs_sum") >= 5
        assert any("event=batched" in line and "images=3" in line for line in w.lines), "\n".join(w.lines[-20:])
        # Each alone (the queue is empty now: nothing to batch with): the same PNG bytes.
        for i, j in enumerate(JOBS):
            alone = final_png(w, w.job(**COMMON, **j))
            assert alone == results[i], f"job {i} differs between the batch and alone"
        assert results[0] != results[1]
    finally:
        assert w.stop() == 0, "\n".join(w.lines[-30:])


def test_cancelled_job_leaves_its_batch_running():
    w = SdWorker("--queue-size", "8", "--batch-images", "4", "--preview-every", "0")
    try:
        run = dict(COMMON, steps=4)
        blocker = w.job(prompt="blocker", steps=4, seed=1)
        a = w.job(**run, prompt="a red cube", seed=3)
        b = w.job(**run, prompt="a blue sphere", seed=4)
        got = {}

        def read_a():
            got["a"] = final_png(w, a)

        reader = threading.Thread(target=read_a)
        reader.start()
        final_png(w, blocker)
        # b is cancelled after its first step inside the batch: its stream ends with "cancelled", a goes on.
        with w.stream(b) as r:
            events = []
            for name, data in named_events(r):
                events.append((name, data))
                if name == "progress" and data["step"] == 1:
                    assert w.delete("/v1/jobs/" + b["job_id"]).status_code == 200
        assert events[-2][0] == "error" and events[-2][1]["code"] == "cancelled", events[-2:]
        reader.join(120)
        assert any("event=batched" in line and "images=2" in line for line in w.lines)
        assert got["a"] == final_png(w, w.job(**run, prompt="a red cube", seed=3))
    finally:
        assert w.stop() == 0, "\n".join(w.lines[-30:])
