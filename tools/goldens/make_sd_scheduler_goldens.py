"""Scheduler goldens from diffusers: timesteps, sigmas and a short denoising loop for every rbee scheduler.

Writes tests/data/sd/schedulers.json (timesteps, sigmas, init_noise_sigma for 20 and 4 steps) and
tests/data/sd/scheduler_loops.safetensors (a 4-step loop driven by a synthetic model so that each update rule is
checked on its own: model_output = 0.5 * scaled_input * cos(t / 400) + eps_fixed, with the noise each stochastic
scheduler drew recorded per step).

Peer: diffusers (with torch CPU). Run: .venv/bin/python tools/goldens/make_sd_scheduler_goldens.py
"""
import json
import math
import os

import numpy as np
import torch
from diffusers import (DDIMScheduler, DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler,
                       EulerDiscreteScheduler, LCMScheduler)
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "sd")

# runwayml/stable-diffusion-v1-5 scheduler/scheduler_config.json (PNDM), the base every scheduler is built from.
SD15 = {"beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
        "num_train_timesteps": 1000, "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
        "trained_betas": None}


def make(name, prediction_type="epsilon"):
    cfg = dict(SD15, prediction_type=prediction_type)
    if name == "euler":
        return EulerDiscreteScheduler.from_config(cfg)
    if name == "euler_a":
        return EulerAncestralDiscreteScheduler.from_config(cfg)
    if name == "ddim":
        return DDIMScheduler.from_config(cfg)
    if name == "dpmpp_2m_karras":
        return DPMSolverMultistepScheduler.from_config(cfg, use_karras_sigmas=True, algorithm_type="dpmsolver++",
                                                       solver_order=2)
    if name == "lcm":
        return LCMScheduler.from_config(cfg)
    raise ValueError(name)


def sigmas_of(s):
    if hasattr(s, "sigmas") and name_has_sigmas(s):
        return [float(v) for v in s.sigmas]
    acp = s.alphas_cumprod
    out = [float(((1 - acp[int(t)]) / acp[int(t)]) ** 0.5) for t in s.timesteps]
    return out


def name_has_sigmas(s):
    return isinstance(s, (EulerDiscreteScheduler, EulerAncestralDiscreteScheduler, DPMSolverMultistepScheduler))


NAMES = ["euler", "euler_a", "ddim", "dpmpp_2m_karras", "lcm"]


def main():
    os.makedirs(ROOT, exist_ok=True)
    seqs = {"config": SD15}
    for name in NAMES:
        for steps in (20, 4):
            s = make(name)
            s.set_timesteps(steps)
            entry = {"timesteps": [float(t) for t in s.timesteps], "init_noise_sigma": float(s.init_noise_sigma)}
            if name_has_sigmas(s):
                entry["sigmas"] = [float(v) for v in s.sigmas]
            else:
                entry["sigmas_at_timesteps"] = sigmas_of(s)
            seqs[f"{name}/{steps}"] = entry
    acp = make("ddim").alphas_cumprod
    seqs["alphas_cumprod"] = [float(v) for v in acp]
    with open(os.path.join(ROOT, "schedulers.json"), "w") as f:
        json.dump(seqs, f, indent=0)

    torch.manual_seed(0)
    shape = (1, 4, 8, 8)
    x_init = torch.randn(shape)
    eps_fixed = torch.randn(shape) * 0.5
    tensors = {"x_init": x_init.contiguous(), "eps_fixed": eps_fixed.contiguous()}
    for name in NAMES:
        for pred in ("epsilon", "v_prediction"):
            if name in ("euler_a", "lcm") and pred == "v_prediction":
                continue
            s = make(name, pred)
            s.set_timesteps(4)
            seed = 1234
            gen = torch.Generator().manual_seed(seed)
            gen_copy = torch.Generator().manual_seed(seed)
            noises = [torch.randn(shape, generator=gen_copy) for _ in range(4)]
            x = x_init * s.init_noise_sigma
            for i, t in enumerate(s.timesteps):
                inp = s.scale_model_input(x, t)
                out = 0.5 * inp * math.cos(float(t) / 400.0) + eps_fixed
                x = s.step(out, t, x, generator=gen).prev_sample
            key = f"{name}/{pred}"
            tensors[key + "/out"] = x.contiguous()
            tensors[key + "/noise"] = torch.stack(noises).contiguous()
    save_file(tensors, os.path.join(ROOT, "scheduler_loops.safetensors"))


if __name__ == "__main__":
    main()
