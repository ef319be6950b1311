#!/usr/bin/env python3
"""Writes the small GGUF test files under tests/data/gguf/ with gguf-py's GGUFWriter (the reference writer).

Files:
  all_types_v3.gguf      every metadata value type, arrays of each, nested arrays, tensors of several dtypes
  aligned64_v3.gguf      general.alignment = 64 and tensor sizes that need padding
  all_types_v2.gguf      all_types_v3.gguf with the version field set to 2 (v2 and v3 share the LE layout)
  big_endian_v3.gguf     a big-endian file (the reader must refuse it)
  unsupported_i8.gguf    a tensor of ggml type I8, which rbee does not load (the reader must refuse it)

Run make_gguf_goldens.py afterwards to refresh the golden JSON files. Deterministic: same bytes every run.
Usage: tools/goldens/make_gguf_testdata.py [OUT_DIR]
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFEndian, GGUFValueType, GGUFWriter

V = GGUFValueType


def write(path, fill, **kwargs):
    w = GGUFWriter(path, "rbee-test", **kwargs)
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def all_types(w):
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 0.1)          # stored as the f32 nearest 0.1
    w.add_bool("t.bool_true", True)
    w.add_bool("t.bool_false", False)
    w.add_string("t.string", "hello")
    w.add_string("t.unicode", "h\u00e9llo w\u00f6rld \u2713 \u65e5\u672c \U0001F41D")
    w.add_uint64("t.u64", 2**64 - 1)
    w.add_int64("t.i64", -(2**62) - 7)
    w.add_float64("t.f64", 0.1)
    w.add_key_value("a.u8", [0, 1, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("a.i8", [-128, 0, 127], V.ARRAY, sub_type=V.INT8)
    w.add_key_value("a.u16", [0, 65535], V.ARRAY, sub_type=V.UINT16)
    w.add_key_value("a.i16", [-32768, 32767], V.ARRAY, sub_type=V.INT16)
    w.add_key_value("a.u32", [0, 4294967295, 7], V.ARRAY, sub_type=V.UINT32)
    w.add_key_value("a.i32", [-2147483648, 2147483647], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("a.f32", [1.5, -0.25, 3.0e-8], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("a.bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    w.add_key_value("a.string", ["alpha", "", "\u03b3\u03b1\u03bc\u03bc\u03b1"], V.ARRAY, sub_type=V.STRING)
    w.add_key_value("a.u64", [0, 2**64 - 1, 2**63], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("a.i64", [-(2**63), 2**63 - 1], V.ARRAY, sub_type=V.INT64)
    w.add_key_value("a.f64", [0.1, -1e300, 2.5], V.ARRAY, sub_type=V.FLOAT64)
    w.add_array("a.nested_i32", [[1, 2, 3], [4, 5]])
    w.add_array("a.nested_str", [["a", "b"], ["c"]])
    w.add_array("a.nested3", [[[1], [2, 3]], [[4]]])
    # A long string array, like a vocabulary.
    w.add_array("a.vocab", [f"tok{i}" for i in range(300)])

    rng = np.random.default_rng(1234)
    w.add_tensor("f32.2x3", np.arange(6, dtype=np.float32).reshape(2, 3) * 1.5 - 2.0)
    w.add_tensor("f16.4", np.array([1.0, -2.5, 0.125, 65504.0], dtype=np.float16))
    bf16_bits = (rng.standard_normal(8).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    w.add_tensor("bf16.2x4", bf16_bits.reshape(2, 4), raw_dtype=GGMLQuantizationType.BF16)
    w.add_tensor("i32.5", np.array([-3, 0, 7, 2**31 - 1, -(2**31)], dtype=np.int32))
    w.add_tensor("f32.2x1x3x2", rng.standard_normal((2, 1, 3, 2)).astype(np.float32))
    # Quantized tensors are raw block bytes: Q8_0 blocks are 34 bytes per 32 elements, Q4_1 20 bytes.
    q8 = rng.integers(0, 256, size=(2, 2 * 34), dtype=np.uint8)
    w.add_tensor("q8_0.2x64", q8, raw_dtype=GGMLQuantizationType.Q8_0)
    q41 = rng.integers(0, 256, size=(3, 20), dtype=np.uint8)
    w.add_tensor("q4_1.3x32", q41, raw_dtype=GGMLQuantizationType.Q4_1)
    q4k = rng.integers(0, 256, size=(1, 144), dtype=np.uint8)
    w.add_tensor("q4_k.1x256", q4k, raw_dtype=GGMLQuantizationType.Q4_K)
    w.add_tensor("f64.3", np.array([0.5, -1.25, 1e100], dtype=np.float64))


def aligned64(w):
    w.add_custom_alignment(64)
    w.add_string("general.name", "aligned")
    w.add_tensor("a", np.arange(5, dtype=np.float32))    # 20 bytes, padded to 64
    w.add_tensor("b", np.arange(17, dtype=np.float16))   # 34 bytes
    w.add_tensor("c", np.arange(33, dtype=np.float32).reshape(3, 11))


def small(w):
    w.add_uint32("t.u32", 7)
    w.add_string("t.s", "be")
    w.add_tensor("x", np.arange(4, dtype=np.float32))


def unsupported(w):
    w.add_tensor("ok", np.arange(4, dtype=np.float32))
    w.add_tensor("bytes.i8", np.arange(8, dtype=np.int8))


def main():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "data", "gguf")
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "all_types_v3.gguf"), all_types)
    write(os.path.join(out, "aligned64_v3.gguf"), aligned64)
    write(os.path.join(out, "big_endian_v3.gguf"), small, endianess=GGUFEndian.BIG)
    write(os.path.join(out, "unsupported_i8.gguf"), unsupported)
    with open(os.path.join(out, "all_types_v3.gguf"), "rb") as f:
        data = bytearray(f.read())
    assert data[4:8] == (3).to_bytes(4, "little")
    data[4:8] = (2).to_bytes(4, "little")
    with open(os.path.join(out, "all_types_v2.gguf"), "wb") as f:
        f.write(data)
    print(f"wrote GGUF test files to {out}")


if __name__ == "__main__":
    main()
