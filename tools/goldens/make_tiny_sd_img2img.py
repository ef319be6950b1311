"""img2img and inpaint goldens for the tiny SD 1.5 pipeline (run tools/goldens/make_tiny_sd.py first).

rbee encodes source images to the VAE posterior mean and takes the initial noise from the caller, so diffusers'
img2img and inpaint pipelines are run with the same two choices: their module-level retrieve_latents is patched
to sample_mode="argmax" (the mean) and their randn_tensor to return the recorded noise. Scheduler: Euler
(deterministic), 4 steps, guidance 7.5, 32x32.

Writes tests/data/tiny_sd/sd15/goldens_img2img.safetensors:
  image [1, 3, 32, 32] in [-1, 1], noise [1, 4, 8, 8], mask [1, 1, 32, 32] (1 = repaint),
  img2img_latent (strength 0.5), inpaint_latent (strength 1.0)
Run: .venv/bin/python tools/goldens/make_tiny_sd_img2img.py
"""
import os

import torch
from diffusers import StableDiffusionImg2ImgPipeline, StableDiffusionInpaintPipeline
from diffusers.pipelines.stable_diffusion import pipeline_stable_diffusion_img2img as i2i_mod
from diffusers.pipelines.stable_diffusion import pipeline_stable_diffusion_inpaint as inp_mod
from safetensors.torch import save_file

DIR = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "tiny_sd", "sd15")
PROMPT = "a photograph of an astronaut riding a horse"


def main():
    gen = torch.Generator().manual_seed(7)
    image = torch.rand((1, 3, 32, 32), generator=gen) * 2 - 1
    noise = torch.randn((1, 4, 8, 8), generator=gen)
    mask = torch.zeros((1, 1, 32, 32))
    mask[:, :, 8:28, 12:32] = 1.0

    def mean_latents(encoder_output, generator=None, sample_mode="sample"):
        return encoder_output.latent_dist.mode()

    def fixed_noise(shape, generator=None, device=None, dtype=None, layout=None):
        assert tuple(shape) == tuple(noise.shape), shape
        return noise.clone().to(dtype=dtype or noise.dtype)

    for mod in (i2i_mod, inp_mod):
        mod.retrieve_latents = mean_latents
        mod.randn_tensor = fixed_noise

    out = {"image": image, "noise": noise, "mask": mask}
    with torch.no_grad():
        i2i = StableDiffusionImg2ImgPipeline.from_pretrained(DIR, torch_dtype=torch.float32, safety_checker=None,
                                                             requires_safety_checker=False)
        out["img2img_latent"] = i2i(PROMPT, image=image, strength=0.5, num_inference_steps=4, guidance_scale=7.5,
                                    output_type="latent").images
        inp = StableDiffusionInpaintPipeline.from_pretrained(DIR, torch_dtype=torch.float32, safety_checker=None,
                                                             requires_safety_checker=False)
        out["inpaint_latent"] = inp(PROMPT, image=image, mask_image=mask, strength=1.0, height=32, width=32,
                                    num_inference_steps=4, guidance_scale=7.5, output_type="latent").images
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(DIR, "goldens_img2img.safetensors"))


if __name__ == "__main__":
    main()
