"""Shared fixtures of sd-worker-rbee's API tests: a real worker process on loopback serving the tiny SD 1.5
pipeline (tests/data/tiny_sd/sd15), and PNG helpers written here from the PNG spec with Python's zlib (an
independent reader of what the worker sends).

RBEE_WORKER_BIN (sd-worker-rbee) and RBEE_MODEL (the pipeline folder) come from ctest; when either is missing
every test is skipped with a message saying what to build.
"""
import base64
import json
import os
import struct
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "api"))
from worker_process import TOKEN, WorkerProcess  # noqa: E402

WORKER_BIN = os.environ.get("RBEE_WORKER_BIN", str(ROOT / "build" / "ci" / "sd-worker-rbee"))
MODEL = os.environ.get("RBEE_MODEL", str(ROOT / "tests" / "data" / "tiny_sd" / "sd15"))
SIZE = 256  # the contract's smallest side; the tiny pipeline is fast there


class SdWorker(WorkerProcess):
    def __init__(self, *extra, binary=None, model=None, **kw):
        if not Path(binary or WORKER_BIN).exists():
            pytest.skip(f"worker binary {binary or WORKER_BIN} is missing: build the sd-worker-rbee target")
        super().__init__(binary or WORKER_BIN, model or MODEL, "--threads", "2", *extra, **kw)

    def job(self, **fields):
        # One step without guidance by default: the tiny pipeline still runs a 64x64 latent at 256x256 (its VAE
        # scales by 4), about a second per UNet pass on a free CI core pair.
        body = {"operation": "image_generation", "prompt": "a red cube", "width": SIZE, "height": SIZE, "steps": 1,
                "guidance_scale": 0}
        body.update(fields)
        r = self.post("/v1/jobs", body)
        assert r.status_code == 200, r.text
        return r.json()

    def stream(self, job, **kw):
        return self.get(job["sse_url"], stream=True, **kw)

    def run_job(self, **fields):
        """Submits a job and reads its whole stream: [(event, data), ...] ending with ("message", "[DONE]")."""
        with self.stream(self.job(**fields)) as r:
            assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
            return list(named_events(r))


def named_events(response):
    """Yields (event name, parsed JSON data) per SSE event; an unnamed event is "message" (the final [DONE])."""
    name, data = "message", []
    for raw in response.iter_lines(decode_unicode=False):
        line = raw.decode("utf-8")
        if line.startswith(":"):
            continue
        if line == "":
            if data:
                text = "\n".join(data)
                yield name, text if text == "[DONE]" else json.loads(text)
            name, data = "message", []
        elif line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        else:
            raise AssertionError(f"not an SSE line: {line!r}")


def png_chunks(png):
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "no PNG signature"
    pos, out = 8, []
    while pos < len(png):
        (n,) = struct.unpack(">I", png[pos:pos + 4])
        kind, data = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", png[pos + 8 + n:pos + 12 + n])
        assert crc == zlib.crc32(kind + data), f"bad CRC at {pos}"
        out.append((kind.decode(), data))
        pos += 12 + n
    return out


def decode_png(png):
    """(width, height, rgb bytes, {tEXt key: value}) of an 8-bit RGB PNG, any row filter."""
    chunks = png_chunks(png)
    assert chunks[0][0] == "IHDR" and chunks[-1][0] == "IEND"
    w, h, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, color, interlace) == (8, 2, 0)
    raw = zlib.decompress(b"".join(d for k, d in chunks if k == "IDAT"))
    stride = w * 3
    assert len(raw) == h * (stride + 1)
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f, cur = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = cur[i - 3] if i >= 3 else 0
            b, c = prev[i], prev[i - 3] if i >= 3 else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            pred = [0, a, b, (a + b) // 2, a if pa <= pb and pa <= pc else (b if pb <= pc else c)][f]
            cur[i] = (cur[i] + pred) & 255
        rows.append(bytes(cur))
        prev = cur
    text = {}
    for k, d in chunks:
        if k == "tEXt":
            key, _, value = d.partition(b"\0")
            text[key.decode("latin-1")] = value.decode("latin-1")
    return w, h, b"".join(rows), text


def encode_png(w, h, pixel, filters=(0,)):
    """An RGB8 PNG of pixel(x, y) -> (r, g, b); row y uses filter type filters[y % len(filters)]."""
    raw = bytearray()
    prev = bytearray(w * 3)
    for y in range(h):
        cur = bytearray()
        for x in range(w):
            cur += bytes(pixel(x, y))
        f = filters[y % len(filters)]
        out = bytearray()
        for i in range(w * 3):
            a = cur[i - 3] if i >= 3 else 0
            b, c = prev[i], prev[i - 3] if i >= 3 else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            pred = [0, a, b, (a + b) // 2, a if pa <= pb and pa <= pc else (b if pb <= pc else c)][f]
            out.append((cur[i] - pred) & 255)
        raw += bytes([f]) + out
        prev = cur

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b""))


def b64png(w, h, pixel, filters=(0,)):
    return base64.b64encode(encode_png(w, h, pixel, filters)).decode()


@pytest.fixture(scope="session")
def sd_worker():
    """The shared worker: auth on, a preview every 2 steps, 2 jobs may wait."""
    w = SdWorker("--preview-every", "2", "--queue-size", "2", "--model-ref", "test:tiny-sd15")
    yield w
    code = w.stop()
    assert code == 0, "worker did not exit cleanly:\n" + "\n".join(w.lines[-30:])


@pytest.fixture(scope="session")
def token():
    return TOKEN
