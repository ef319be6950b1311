#!/usr/bin/env python3
"""Writes the safetensors test files under tests/data/safetensors/ with the `safetensors` package (numpy API)
and their goldens, read back with safetensors.safe_open.

  single.safetensors + single.golden.json       every dtype rbee loads (no BF16: numpy has none), a scalar,
                                                an empty tensor, __metadata__
  sharded/model-0000{1,2}-of-00002.safetensors  a checkpoint split in two, with the HF index file and a
  sharded/model.safetensors.index.json          config.json; sharded.golden.json lists every tensor
  sharded/config.json
  unsupported_i8.safetensors                    an I8 tensor (rbee refuses it)

Golden entries: name, dtype, shape, data_offsets (from the file's header), the shard file, and a checksum of the
tensor's bytes (sum of b[i] * ((i mod 65521) + 1) modulo 2**64, as in make_gguf_goldens.py), plus the values
for tensors of at most 16 elements. Deterministic: same bytes every run.
"""
import json
import os
import struct

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "data", "safetensors")


def checksum(data: bytes) -> int:
    b = np.frombuffer(data, dtype=np.uint8).astype(np.uint64)
    w = (np.arange(len(b), dtype=np.uint64) % np.uint64(65521)) + np.uint64(1)
    return int(np.sum(b * w, dtype=np.uint64))


def header_of(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def describe(path, shard_name):
    header = header_of(path)
    out = []
    with safe_open(path, framework="np") as f:
        for name in sorted(f.keys()):
            t = f.get_tensor(name)
            entry = {
                "name": name,
                "dtype": header[name]["dtype"],
                "shape": list(t.shape),
                "data_offsets": header[name]["data_offsets"],
                "file": shard_name,
                "checksum": str(checksum(np.ascontiguousarray(t).tobytes())),
            }
            if t.size <= 16:
                entry["values"] = [bool(v) if t.dtype == np.bool_ else v.item() for v in t.reshape(-1)]
            out.append(entry)
        metadata = f.metadata() or {}
    return out, metadata


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")


def main():
    os.makedirs(os.path.join(OUT, "sharded"), exist_ok=True)
    rng = np.random.default_rng(7)
    single = {
        "f32.2x3": (np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5 - 1.0),
        "f16.4": np.array([1.0, -2.5, 0.125, 65504.0], dtype=np.float16),
        "f64.2x2": rng.standard_normal((2, 2)),
        "i64.3": np.array([-(2**63), 0, 2**63 - 1], dtype=np.int64),
        "i32.2x1x2": np.array([-5, 6, 2**31 - 1, -(2**31)], dtype=np.int32).reshape(2, 1, 2),
        "u32.2": np.array([0, 2**32 - 1], dtype=np.uint32),
        "u8.5": np.array([0, 1, 127, 128, 255], dtype=np.uint8),
        "bool.3": np.array([True, False, True]),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty.0x3": np.zeros((0, 3), dtype=np.float32),
        "big.f32.64x33": rng.standard_normal((64, 33)).astype(np.float32),
    }
    path = os.path.join(OUT, "single.safetensors")
    save_file(single, path, metadata={"format": "pt", "note": "rbee test \u2713"})
    tensors, metadata = describe(path, "single.safetensors")
    write_json(os.path.join(OUT, "single.golden.json"), {"metadata": metadata, "tensors": tensors})

    shards = [
        {"model.embed.weight": rng.standard_normal((16, 8)).astype(np.float16),
         "model.layers.0.w": rng.standard_normal((8, 8)).astype(np.float32)},
        {"model.layers.1.w": rng.standard_normal((8, 8)).astype(np.float32),
         "model.norm.weight": np.ones(8, dtype=np.float32),
         "lm_head.weight": rng.standard_normal((16, 8)).astype(np.float16)},
    ]
    weight_map = {}
    all_tensors = []
    total = 0
    for i, tensors in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        p = os.path.join(OUT, "sharded", name)
        save_file(tensors, p, metadata={"format": "pt"})
        for k, v in tensors.items():
            weight_map[k] = name
            total += v.nbytes
        described, _ = describe(p, name)
        all_tensors += described
    write_json(os.path.join(OUT, "sharded", "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})
    write_json(os.path.join(OUT, "sharded", "config.json"),
               {"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "vocab_size": 16, "rms_norm_eps": 1e-5})
    write_json(os.path.join(OUT, "sharded.golden.json"),
               {"total_size": total, "tensors": sorted(all_tensors, key=lambda e: e["name"])})

    save_file({"ok": np.arange(4, dtype=np.float32), "bytes.i8": np.arange(8, dtype=np.int8)},
              os.path.join(OUT, "unsupported_i8.safetensors"))
    print(f"wrote safetensors test files to {OUT}")


if __name__ == "__main__":
    main()
