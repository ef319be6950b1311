#!/usr/bin/env python3
"""Golden files for the GGUF block-type tests (tests/conformance/test_quant.cpp), made with gguf-py.

  dequant_<type>.bin   random packed blocks and gguf-py's dequantization of them:
                       u32 n_blocks | n_blocks * type_size bytes | n_blocks * block_size f32
  quantize_<type>.bin  f32 inputs and gguf-py's quantization of them (legacy types gguf-py implements):
                       u32 n_values | n_values f32 | packed bytes
All little-endian. Blocks are random bytes except their scale fields, which are set to finite values (normal,
subnormal, zero, negative, large) so that dequantized values are finite. gguf-py has no Q8_1 or Q8_K
dequantizer (they are activation formats); for those two this script computes d * qs itself in numpy.

Usage: .venv/bin/python tools/goldens/make_quant_goldens.py [out_dir]   (default tests/data/quant)
"""
import importlib.metadata
import json
import os
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

# (type, block size, bytes per block, byte offsets of f16 scale fields)
LAYOUTS = {
    "q4_0": (T.Q4_0, 32, 18, [0]),
    "q4_1": (T.Q4_1, 32, 20, [0, 2]),
    "q5_0": (T.Q5_0, 32, 22, [0]),
    "q5_1": (T.Q5_1, 32, 24, [0, 2]),
    "q8_0": (T.Q8_0, 32, 34, [0]),
    "q8_1": (T.Q8_1, 32, 36, [0, 2]),
    "q2_k": (T.Q2_K, 256, 84, [80, 82]),
    "q3_k": (T.Q3_K, 256, 110, [108]),
    "q4_k": (T.Q4_K, 256, 144, [0, 2]),
    "q5_k": (T.Q5_K, 256, 176, [0, 2]),
    "q6_k": (T.Q6_K, 256, 210, [208]),
    "q8_k": (T.Q8_K, 256, 292, []),  # f32 d at offset 0
}


def finite_f16_scales(rng, n):
    """n f16 values: mostly normal magnitudes 1e-4..4 with random sign, plus zero, subnormal and large ones."""
    mag = 10.0 ** rng.uniform(-4, 0.6, size=n)
    vals = (mag * rng.choice([-1.0, 1.0], size=n)).astype(np.float16)
    specials = np.array([0.0, -0.0, 6e-8, -3e-6, 65504.0, -1024.0], dtype=np.float16)
    k = min(len(specials), n // 4)
    vals[:k] = specials[:k]
    rng.shuffle(vals)
    return vals


def random_blocks(rng, name, n_blocks):
    _, _, size, offsets = LAYOUTS[name]
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in offsets:
        raw[:, off:off + 2] = finite_f16_scales(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    if name == "q8_k":
        d = (10.0 ** rng.uniform(-6, 1, size=n_blocks) * rng.choice([-1.0, 1.0], size=n_blocks)).astype(np.float32)
        d[0] = 0.0
        raw[:, 0:4] = d.view(np.uint8).reshape(n_blocks, 4)
    return raw


def dequantize(name, raw):
    qtype, bs, size, _ = LAYOUTS[name]
    if name == "q8_1":  # f16 d, f16 s, int8 qs[32]
        d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
        return (d * raw[:, 4:].copy().view(np.int8).astype(np.float32)).reshape(-1)
    if name == "q8_k":  # f32 d, int8 qs[256], int16 bsums[16]
        d = raw[:, 0:4].copy().view(np.float32)
        return (d * raw[:, 4:260].copy().view(np.int8).astype(np.float32)).reshape(-1)
    return quants.dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)


def quantize_inputs(rng, n_blocks):
    """Blocks of varied scale and shape, with edge cases for the round-to-nearest rules."""
    x = rng.standard_normal((n_blocks, 32)).astype(np.float32)
    x *= (10.0 ** rng.uniform(-3, 2, size=(n_blocks, 1))).astype(np.float32)
    x[0] = 0.0                                    # all zero: scale 0
    x[1] = 0.75                                   # constant block
    x[2, :] = 0.01
    x[2, 7] = -5.0                                # one dominant negative element
    x[3] = np.arange(32, dtype=np.float32) - 16   # exact grid points
    x[4] = (np.arange(32, dtype=np.float32) - 15.5) * 0.5  # values halfway between levels
    x[5] = np.abs(x[5])                           # all positive
    x[6] = -np.abs(x[6])                          # all negative
    return x.reshape(-1)


def write(path, *parts):
    with open(path, "wb") as f:
        for p in parts:
            f.write(p)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data",
                                                              "quant")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20240607)
    manifest = {"gguf": importlib.metadata.version("gguf"), "numpy": np.__version__,
                "files": []}
    for name, (_, bs, size, _) in LAYOUTS.items():
        n_blocks = 48 if bs == 32 else 12
        raw = random_blocks(rng, name, n_blocks)
        values = dequantize(name, raw)
        assert values.shape == (n_blocks * bs,) and np.all(np.isfinite(values)), name
        fname = f"dequant_{name}.bin"
        write(os.path.join(out, fname), struct.pack("<I", n_blocks), raw.tobytes(), values.astype("<f4").tobytes())
        manifest["files"].append(fname)
    for name in ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"]:
        qtype, bs, size, _ = LAYOUTS[name]
        x = quantize_inputs(rng, 64)
        packed = quants.quantize(x.reshape(1, -1), qtype).reshape(-1)
        assert packed.size == x.size // bs * size, name
        fname = f"quantize_{name}.bin"
        write(os.path.join(out, fname), struct.pack("<I", x.size), x.astype("<f4").tobytes(), packed.tobytes())
        manifest["files"].append(fname)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
