"""torch.randn on the CPU from torch.Generator().manual_seed(seed), the values rbee's TorchGenerator must draw
(src/sd/torch_generator.h): sizes below 16 (double sampler with its cached second value: two tensors drawn in a row),
exactly 16, 37 (the tail of 16 redrawn) and a latent-sized 4x5x7, then a second tensor from the same generator.

Writes tests/data/sd/torch_randn.json: [{"seed", "sizes": [n, ...], "values": [[...], ...]}].
Run: /tmp/sdgold/bin/python tools/goldens/make_torch_randn_goldens.py
"""
import json
import os

import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "sd", "torch_randn.json")
CASES = [(0, [5, 3]), (3, [16, 16]), (1234, [37, 140]), (2**32 + 7, [140, 1]), (42, [1, 1, 2])]


def main():
    out = []
    for seed, sizes in CASES:
        g = torch.Generator().manual_seed(seed)
        out.append({"seed": seed, "sizes": sizes,
                    "values": [torch.randn(n, generator=g, dtype=torch.float32).tolist() for n in sizes]})
    with open(OUT, "w") as f:
        json.dump({"torch": torch.__version__, "cases": out}, f)


if __name__ == "__main__":
    main()
