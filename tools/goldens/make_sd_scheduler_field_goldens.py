"""Scheduler goldens for config fields and the samplers added after make_sd_scheduler_goldens.py (DPM++ 2M without
Karras sigmas, Heun, PNDM, UniPC, DPM++ SDE with its Brownian noise replaced by recorded draws): each case is one
sampler built by diffusers' <Class>.from_config(SD 1.5 config + fields), as rbee builds sampler X from a model folder's
scheduler config.

Writes tests/data/sd/scheduler_fields.json: {"config": SD15, "cases": [{"name", "sampler", "fields", "steps",
"timesteps", "sigmas" (or "sigmas_at_timesteps"), "init_noise_sigma", "order"}]} and
tests/data/sd/scheduler_field_loops.safetensors: "<name>/out" after the 4-step loop of make_sd_scheduler_goldens.py
(model_output = 0.5 * scaled_input * cos(t / 400) + eps_fixed), "<name>/noise" the noises drawn, plus x_init and
eps_fixed.

Run: /tmp/sdgold/bin/python tools/goldens/make_sd_scheduler_field_goldens.py
"""
import inspect
import json
import math
import os

import torch
from diffusers import (DDIMScheduler, DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler,
                       DPMSolverSDEScheduler, EulerDiscreteScheduler, HeunDiscreteScheduler, LCMScheduler,
                       PNDMScheduler, UniPCMultistepScheduler)
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "sd")
SD15 = {"beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
        "num_train_timesteps": 1000, "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
        "trained_betas": None}

CLASSES = {
    "euler": (EulerDiscreteScheduler, {}),
    "euler_a": (EulerAncestralDiscreteScheduler, {}),
    "ddim": (DDIMScheduler, {}),
    "lcm": (LCMScheduler, {}),
    "heun": (HeunDiscreteScheduler, {}),
    "pndm": (PNDMScheduler, {}),
    "unipc": (UniPCMultistepScheduler, {}),
    "dpmpp_sde": (DPMSolverSDEScheduler, {}),
    "dpmpp_2m": (DPMSolverMultistepScheduler, {"algorithm_type": "dpmsolver++", "solver_order": 2,
                                               "use_karras_sigmas": False}),
    "dpmpp_2m_karras": (DPMSolverMultistepScheduler, {"algorithm_type": "dpmsolver++", "solver_order": 2,
                                                      "use_karras_sigmas": True}),
}

TRAINED = [0.0001 + (0.03 - 0.0001) * (i / 999) ** 1.5 for i in range(1000)]

# (name, sampler, fields, steps, loop prediction types)
CASES = [
    ("heun", "heun", {}, 20, ["epsilon", "v_prediction"]),
    ("heun_4", "heun", {}, 4, []),
    ("heun_karras_leading", "heun", {"use_karras_sigmas": True, "timestep_spacing": "leading"}, 10, ["epsilon"]),
    ("heun_defaults", "heun", {"beta_start": None, "beta_end": None, "beta_schedule": None}, 6, ["epsilon"]),
    ("dpmpp_sde", "dpmpp_sde", {}, 20, ["epsilon", "v_prediction"]),
    ("dpmpp_sde_karras", "dpmpp_sde", {"use_karras_sigmas": True}, 6, ["epsilon"]),
    ("dpmpp_sde_defaults_leading", "dpmpp_sde", {"beta_start": None, "beta_end": None, "beta_schedule": None,
                                                "timestep_spacing": "leading"}, 5, ["epsilon"]),
    ("unipc", "unipc", {}, 20, ["epsilon", "v_prediction"]),
    ("unipc_4", "unipc", {}, 4, []),
    # bh1 with a final sigma of 0 gives NaN in diffusers (B(h) = -inf times a zero residual): the loop ends at sigma_min
    ("unipc_bh1_karras", "unipc", {"solver_type": "bh1", "use_karras_sigmas": True}, 8, []),
    ("unipc_bh1_sigma_min", "unipc", {"solver_type": "bh1", "final_sigmas_type": "sigma_min"}, 8, ["epsilon"]),
    ("unipc_no_lower_final_sigma_min", "unipc", {"lower_order_final": False, "final_sigmas_type": "sigma_min"}, 6,
     ["epsilon"]),
    ("unipc_zero_snr_trailing", "unipc", {"rescale_betas_zero_snr": True, "timestep_spacing": "trailing"}, 8,
     ["v_prediction"]),
    ("unipc_leading", "unipc", {"timestep_spacing": "leading"}, 5, ["epsilon"]),
    ("pndm", "pndm", {}, 20, ["epsilon", "v_prediction"]),
    ("pndm_4", "pndm", {}, 4, []),
    ("pndm_1", "pndm", {}, 1, []),
    ("pndm_linspace", "pndm", {"timestep_spacing": "linspace"}, 10, ["epsilon"]),
    ("pndm_trailing", "pndm", {"timestep_spacing": "trailing"}, 7, ["epsilon"]),
    ("dpmpp_2m", "dpmpp_2m", {}, 20, ["epsilon", "v_prediction"]),
    ("dpmpp_2m_4", "dpmpp_2m", {}, 4, []),
    ("dpmpp_2m_leading", "dpmpp_2m", {"timestep_spacing": "leading"}, 10, ["epsilon"]),
    ("dpmpp_2m_trailing", "dpmpp_2m", {"timestep_spacing": "trailing"}, 10, []),
    ("dpmpp_2m_sigma_min", "dpmpp_2m", {"final_sigmas_type": "sigma_min"}, 8, ["epsilon"]),
    ("dpmpp_2m_euler_final", "dpmpp_2m", {"final_sigmas_type": "sigma_min", "euler_at_final": True,
                                          "lower_order_final": False}, 20, ["epsilon"]),
    ("dpmpp_2m_karras_zero_snr", "dpmpp_2m_karras", {"rescale_betas_zero_snr": True}, 10, ["v_prediction"]),
    ("euler_karras", "euler", {"use_karras_sigmas": True}, 20, ["epsilon", "v_prediction"]),
    ("euler_karras_leading", "euler", {"use_karras_sigmas": True, "timestep_spacing": "leading"}, 10, []),
    ("euler_karras_sigma_range", "euler", {"use_karras_sigmas": True, "sigma_min": 0.1, "sigma_max": 10.0}, 8,
     ["epsilon"]),
    ("euler_sigma_min", "euler", {"final_sigmas_type": "sigma_min"}, 6, ["epsilon"]),
    ("euler_zero_snr", "euler", {"rescale_betas_zero_snr": True, "timestep_spacing": "trailing"}, 10,
     ["v_prediction"]),
    ("euler_a_zero_snr", "euler_a", {"rescale_betas_zero_snr": True, "timestep_spacing": "trailing"}, 10,
     ["v_prediction"]),
    ("ddim_zero_snr", "ddim", {"rescale_betas_zero_snr": True, "timestep_spacing": "trailing"}, 10,
     ["v_prediction"]),
    ("lcm_zero_snr", "lcm", {"rescale_betas_zero_snr": True}, 4, ["v_prediction"]),  # epsilon: x0 = inf at t 999
    ("ddim_clip", "ddim", {"clip_sample": True, "clip_sample_range": 0.8}, 4, ["epsilon"]),
    ("ddim_defaults", "ddim", {"clip_sample": None, "set_alpha_to_one": None}, 4, ["epsilon"]),
    ("euler_trained_betas", "euler", {"trained_betas": TRAINED}, 10, ["epsilon"]),
    ("euler_cosine", "euler", {"beta_schedule": "squaredcos_cap_v2"}, 10, ["epsilon"]),
    ("ddim_cosine", "ddim", {"beta_schedule": "squaredcos_cap_v2"}, 10, []),
    ("euler_linear", "euler", {"beta_schedule": "linear", "beta_start": 0.0001, "beta_end": 0.02}, 10, []),
]


def make(sampler, fields, prediction_type="epsilon"):
    cls, forced = CLASSES[sampler]
    cfg = dict(SD15, prediction_type=prediction_type)
    for k, v in fields.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    cfg.update(forced)
    return cls.from_config(cfg)


def finite_or_none(v):
    """JSON has no infinity: the infinite sigma of a zero-SNR schedule's last timestep is written as null."""
    return v if math.isfinite(v) else None


def has_sigmas(s):
    return isinstance(s, (EulerDiscreteScheduler, EulerAncestralDiscreteScheduler, DPMSolverMultistepScheduler,
                          HeunDiscreteScheduler, UniPCMultistepScheduler, DPMSolverSDEScheduler))


def main():
    torch.manual_seed(0)
    shape = (1, 4, 8, 8)
    x_init = torch.randn(shape)
    eps_fixed = torch.randn(shape) * 0.5
    tensors = {"x_init": x_init.contiguous(), "eps_fixed": eps_fixed.contiguous()}
    cases = []
    for name, sampler, fields, steps, loops in CASES:
        s = make(sampler, fields)
        s.set_timesteps(steps)
        entry = {"name": name, "sampler": sampler, "fields": {k: v for k, v in fields.items() if k != "trained_betas"},
                 "trained_betas": "trained_betas" in fields, "steps": steps,
                 "timesteps": [float(t) for t in s.timesteps], "init_noise_sigma": float(s.init_noise_sigma),
                 "order": int(getattr(s, "order", 1))}
        if has_sigmas(s):
            entry["sigmas"] = [finite_or_none(float(v)) for v in s.sigmas]
        else:
            acp = s.alphas_cumprod
            entry["sigmas_at_timesteps"] = [finite_or_none(float(((1 - acp[int(t)]) / acp[int(t)]) ** 0.5))
                                             for t in s.timesteps]
        cases.append(entry)
        for pred in loops:
            s = make(sampler, fields, pred)
            s.set_timesteps(4)
            gen = torch.Generator().manual_seed(1234)
            gen_copy = torch.Generator().manual_seed(1234)
            noises = [torch.randn(shape, generator=gen_copy) for _ in range(len(s.timesteps))]
            x = x_init * s.init_noise_sigma
            current = [0]
            if isinstance(s, DPMSolverSDEScheduler):  # its Brownian-tree noise replaced by the recorded draws
                s.noise_sampler = lambda sigma, sigma_next: noises[current[0]]
            for k, t in enumerate(s.timesteps):
                current[0] = k
                inp = s.scale_model_input(x, t)
                out = 0.5 * inp * math.cos(float(t) / 400.0) + eps_fixed
                takes_generator = "generator" in inspect.signature(s.step).parameters
                x = (s.step(out, t, x, generator=gen) if takes_generator else s.step(out, t, x)).prev_sample
            tensors[f"{name}/{pred}/out"] = x.contiguous()
            tensors[f"{name}/{pred}/noise"] = torch.stack(noises).contiguous()
    with open(os.path.join(ROOT, "scheduler_fields.json"), "w") as f:
        json.dump({"config": SD15, "trained_betas": TRAINED, "cases": cases}, f)
    save_file(tensors, os.path.join(ROOT, "scheduler_field_loops.safetensors"))


if __name__ == "__main__":
    main()
