#!/usr/bin/env python3
"""Time the decode products of Llama-2-7B F16 at M rows through PyTorch's cuBLAS (a reference point for rbee's
vendor-GEMM path): one GPU's shapes and one rank's of a two-way tensor split, each as x [M, K] . w [N, K]^T in f16,
replayed in a CUDA graph, against the weight bytes over the device-to-device copy bandwidth measured in the same run.
Each graph cycles through enough copies of the weights (>= 256 MiB in all) that none is served from L2 (50 MB).

Usage: python3 gemm_shapes_torch.py [--rows 64,1] [--device 0]
"""
import argparse

import torch

SHAPES = [  # (what, K, N) of one GPU; a rank of two: column-parallel N / 2, row-parallel K / 2
    ("qkv", 4096, 12288, "col"),
    ("attn out", 4096, 4096, "row"),
    ("gate/up", 4096, 22016, "col"),
    ("down", 11008, 4096, "row"),
]


def graph_time_us(fn, calls=20, reps=20):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1000.0 / (calls * reps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="64,16,1")
    ap.add_argument("--device", type=int, default=0)
    a = ap.parse_args()
    torch.cuda.set_device(a.device)
    n = 256 << 20
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_us = graph_time_us(lambda: dst.copy_(src), calls=5, reps=10)
    copy_gbs = 2 * n / copy_us / 1e3
    print(f"{torch.cuda.get_device_name()}: copy {copy_gbs:.0f} GB/s (bytes read + written), torch {torch.__version__}")
    print("| rows | part | product | K | N | weight MB | us | weight GB/s | of copy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for m in [int(r) for r in a.rows.split(",")]:
        for part in ("1 GPU", "rank of 2"):
            for what, k, nn, kind in SHAPES:
                if part != "1 GPU":
                    k, nn = (k, nn // 2) if kind == "col" else (k // 2, nn)
                copies = max(1, -(-(256 << 20) // (nn * k * 2)))
                ws = [torch.randn(nn, k, dtype=torch.float16, device="cuda") for _ in range(copies)]
                x = torch.randn(m, k, dtype=torch.float16, device="cuda")
                out = torch.empty(m, nn, dtype=torch.float16, device="cuda")
                turn = [0]

                def call():
                    torch.mm(x, ws[turn[0] % copies].t(), out=out)
                    turn[0] += 1

                us = graph_time_us(call, calls=max(20, copies))
                mb = nn * k * 2 / 1e6
                gbs = mb / us * 1e3  # MB per us = TB/s; x 1000 = GB/s
                print(f"| {m} | {part} | {what} | {k} | {nn} | {mb:.1f} | {us:.1f} | {gbs:.0f} | {gbs / copy_gbs:.2f} |")


if __name__ == "__main__":
    main()
