"""PNG decoder goldens: small images in every colour type and bit depth PNG has, written by Pillow (which picks
adaptive row filters, so every filter type occurs), next to the RGB8 pixels Pillow decodes them to.

    .venv/bin/python tools/goldens/make_png_decode_goldens.py

Writes tests/data/png/<name>.png and <name>.rgb (width*height*3 bytes, row-major RGB) for tests/sd/test_png.cpp.
"""
from pathlib import Path

import numpy as np
from PIL import Image

OUT = Path(__file__).resolve().parents[2] / "tests" / "data" / "png"
W, H = 37, 11  # odd sizes: sub-byte rows end mid-byte


def base_rgb(seed):
    rng = np.random.default_rng(seed)
    # smooth gradients plus noise, so that Sub/Up/Average/Paeth filters win on different rows
    y, x = np.mgrid[0:H, 0:W]
    img = np.stack([(x * 7 + y * 3) % 256, (x * 2 + y * 11) % 256, (x * y) % 256], -1).astype(np.int32)
    img[H // 2:] += rng.integers(0, 64, size=(H - H // 2, W, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def png_every_filter(rgb):
    """RGB8 PNG whose row y uses filter type y % 5 (Pillow never picks Average on these images)."""
    import struct
    import zlib

    h, w, _ = rgb.shape
    rows = rgb.reshape(h, w * 3).astype(np.int64)
    raw = bytearray()
    for y in range(h):
        f = y % 5
        cur = rows[y]
        prev = rows[y - 1] if y > 0 else np.zeros_like(cur)
        out = []
        for i in range(w * 3):
            a = cur[i - 3] if i >= 3 else 0
            b = prev[i]
            c = prev[i - 3] if i >= 3 else 0
            pred = [0, a, b, (a + b) // 2, paeth(a, b, c)][f]
            out.append((cur[i] - pred) % 256)
        raw += bytes([f]) + bytes(out)

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b"")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    rgb = base_rgb(0)
    images = {
        "rgb8": Image.fromarray(rgb, "RGB"),
        "rgba8": Image.fromarray(np.dstack([rgb, (np.arange(W * H).reshape(H, W) % 256).astype(np.uint8)]), "RGBA"),
        "gray8": Image.fromarray(rgb[..., 0], "L"),
        "gray1": Image.fromarray(rgb[..., 0] > 100).convert("1"),
        "gray_alpha8": Image.fromarray(np.dstack([rgb[..., 1], rgb[..., 2]]), "LA"),
        "palette8": Image.fromarray(rgb, "RGB").quantize(colors=200),
        "palette4": Image.fromarray(rgb, "RGB").quantize(colors=16),
        "gray16": Image.fromarray((rgb[..., 0].astype(np.uint16) * 256 + rgb[..., 1]).astype(np.uint16)),
    }
    every = png_every_filter(rgb)
    (OUT / "rgb8_every_filter.png").write_bytes(every)
    (OUT / "rgb8_every_filter.rgb").write_bytes(rgb.tobytes())
    import io
    assert np.array_equal(np.array(Image.open(io.BytesIO(every)).convert("RGB")), rgb), "filter encoder is wrong"
    for name, im in images.items():
        kw = {"bits": 4} if name == "palette4" else {}
        path = OUT / f"{name}.png"
        im.save(path, optimize=False, **kw)
        back = Image.open(path)
        if back.mode == "I;16":  # Pillow's RGB of 16-bit grey clips; take the high byte as the decoder does
            arr = (np.array(back, dtype=np.uint16) >> 8).astype(np.uint8)
            out = np.dstack([arr, arr, arr])
        else:
            out = np.array(back.convert("RGB"), dtype=np.uint8)
        (OUT / f"{name}.rgb").write_bytes(out.tobytes())
        print(name, back.mode, back.info.get("bits", ""), path.stat().st_size)


if __name__ == "__main__":
    main()
