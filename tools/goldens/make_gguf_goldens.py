#!/usr/bin/env python3
"""Golden JSON for GGUF files, read with gguf-py's GGUFReader (the reference reader).

For each file: version, alignment, data offset, every metadata key with its type and value (scalars exactly;
arrays as element type, length, a checksum of all elements, and the elements themselves when there are at most
64, nested arrays recursively), and every tensor's name, ggml type, row-major shape, offset in the data section,
byte size and a checksum of its bytes. tests/unit/test_gguf.cpp recomputes the same checksums from rbee's parse.

Checksum of a byte string b: sum over i of b[i] * ((i mod 65521) + 1), modulo 2**64. Array elements are
serialized for it as: string -> u64 LE length then the UTF-8 bytes; integers and bools -> i64 LE (u64 bit for
bit); floats -> f64 LE.

Usage: tools/goldens/make_gguf_goldens.py            (the default model and tests/data/gguf/*.gguf)
       tools/goldens/make_gguf_goldens.py FILE OUT.json
"""
import glob
import json
import os
import struct
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType

V = GGUFValueType
NAMES = {V.UINT8: "u8", V.INT8: "i8", V.UINT16: "u16", V.INT16: "i16", V.UINT32: "u32", V.INT32: "i32",
         V.FLOAT32: "f32", V.BOOL: "bool", V.STRING: "string", V.ARRAY: "array", V.UINT64: "u64",
         V.INT64: "i64", V.FLOAT64: "f64"}
FULL_ARRAY_LIMIT = 64


def checksum(data: bytes) -> int:
    b = np.frombuffer(data, dtype=np.uint8).astype(np.uint64)
    w = (np.arange(len(b), dtype=np.uint64) % np.uint64(65521)) + np.uint64(1)
    return int(np.sum(b * w, dtype=np.uint64))


def scalar(part, vtype):
    x = part[0]
    if vtype == V.BOOL:
        return bool(x)
    if vtype in (V.FLOAT32, V.FLOAT64):
        return float(x)
    return int(x)


def serialize(value, vtype):
    if vtype == V.STRING:
        raw = value.encode("utf-8")
        return struct.pack("<Q", len(raw)) + raw
    if vtype in (V.FLOAT32, V.FLOAT64):
        return struct.pack("<d", value)
    if vtype == V.UINT64:
        return struct.pack("<Q", value)
    return struct.pack("<q", int(value))


def walk(parts, i, vtype):
    """Rebuilds one value from the reader's flat parts list; returns (json value, next part index)."""
    if vtype == V.STRING:
        return bytes(parts[i + 1]).decode("utf-8"), i + 2
    if vtype != V.ARRAY:
        return scalar(parts[i], vtype), i + 1
    etype = V(int(parts[i][0]))
    n = int(parts[i + 1][0])
    i += 2
    items = []
    for _ in range(n):
        v, i = walk(parts, i, etype)
        items.append(v)
    out = {"array_type": NAMES[etype], "length": n}
    if etype != V.ARRAY:
        out["checksum"] = str(checksum(b"".join(serialize(v, etype) for v in items)))
    if n <= FULL_ARRAY_LIMIT or etype == V.ARRAY:
        out["values"] = items
    else:
        out["head"] = items[:8]
        out["tail"] = items[-4:]
    return out, i


def golden(path):
    r = GGUFReader(path)
    meta = []
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        value, end = walk(field.parts, 3, vtype)
        assert end == len(field.parts), name
        entry = {"key": name, "type": NAMES[vtype]}
        if vtype == V.ARRAY:
            entry.update(value)
        else:
            entry["value"] = value
        meta.append(entry)
    tensors = []
    for t in r.tensors:
        start = int(t.data_offset)
        nbytes = int(t.n_bytes)
        raw = r.data[start:start + nbytes].tobytes()
        tensors.append({
            "name": t.name,
            "ggml_type": int(t.tensor_type),
            "shape": [int(d) for d in reversed(t.shape.tolist())],
            "offset": start - int(r.data_offset),
            "bytes": nbytes,
            "checksum": str(checksum(raw)),
        })
    return {
        "file": os.path.basename(path),
        "version": int(r.fields["GGUF.version"].parts[0][0]),
        "alignment": int(r.alignment),
        "data_offset": int(r.data_offset),
        "file_size": os.path.getsize(path),
        "metadata": meta,
        "tensors": tensors,
    }


def write(path, out):
    with open(out, "w", encoding="utf-8") as f:
        json.dump(golden(path), f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{path} -> {out}")


def main():
    if len(sys.argv) == 3:
        write(sys.argv[1], sys.argv[2])
        return
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    data = os.path.join(root, "tests", "data", "gguf")
    write(os.path.join(root, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"),
          os.path.join(data, "SmolLM2-135M-Instruct.Q4_1.golden.json"))
    for p in sorted(glob.glob(os.path.join(data, "*.gguf"))):
        base = os.path.basename(p)
        if base.startswith("big_endian") or base.startswith("unsupported"):
            continue  # files the reader must refuse; their tests need no golden
        write(p, p[:-len(".gguf")] + ".golden.json")


if __name__ == "__main__":
    main()
