"""Tiny random-weight SDXL pipeline and its goldens, built with diffusers from the stabilityai SDXL base configs cut
down (run tools/goldens/make_tiny_sd.py's helpers; this script imports them).

Kept from stabilityai/stable-diffusion-xl-base-1.0: two text encoders (CLIPTextModel with quick_gelu and
"<|endoftext|>" padding; CLIPTextModelWithProjection with gelu, "!" padding and text_projection), the context as
both penultimate hidden states concatenated (32 + 48 = 80 here, 768 + 1280 in the real model), the UNet's
"text_time" added conditioning (addition_time_embed_dim 8, projection_class_embeddings_input_dim 40 + 6 * 8),
the block layout DownBlock2D / CrossAttnDownBlock2D / CrossAttnDownBlock2D (no attention at the first level),
per-level transformer_layers_per_block [1, 1, 2] (2 layers in the mid block and the first up block), per-level
head counts, linear projections, the SDXL VAE config (scaling_factor 0.13025, force_upcast) and the base model's
Euler "leading" scheduler config; force_zeros_for_empty_prompt.

Writes tests/data/tiny_sd/sdxl/ in diffusers layout and tests/data/tiny_sd/sdxl/goldens.safetensors:
  ids1_cond, ids2_cond              both tokenizers' ids of PROMPT (padded to 77)
  text1_penult, text2_penult        hidden_states[-2] of each encoder for PROMPT [1, 77, 32] / [1, 77, 48]
  text2_pooled                      text_embeds of encoder 2 (projected pooled output) [1, 40]
  context_cond, pooled_cond         StableDiffusionXLPipeline.encode_prompt(PROMPT): [1, 77, 80], [1, 40]
  context_neg, pooled_neg           the same for the negative prompt NEG
  unet_sample, unet_context, unet_text_embeds, unet_time_ids, unet_out   one UNet forward at t = UNET_T
  vae_latent, vae_image             VAE decode of a random latent (latent / scaling_factor)
  vae_enc_image, vae_enc_mean       VAE encode (posterior mean)
  t2i_noise, t2i_latent             4 steps Euler, guidance 5, no negative prompt (zeroed), original size 48x64
                                    (h x w), crop (2, 3), 32x32 output
  t2i_neg_latent                    the same with negative prompt NEG and default sizes
  turbo_latent                      SDXL-Turbo style: Euler ancestral with "trailing" spacing, 1 step, guidance 0
                                    (the last ancestral step adds no noise, so it is deterministic)
  i2i_image, i2i_latent             img2img, strength 0.5, 4 steps, guidance 5 (posterior mean, explicit noise)
  inpaint_mask, inpaint_latent      inpaint, strength 1.0, 4 steps, guidance 5
Weights are rounded to f16 and stored as f16; goldens use the rounded weights in f32.
Run: .venv/bin/python tools/goldens/make_tiny_sdxl.py
"""
import os
import sys

import torch
from diffusers import (AutoencoderKL, EulerAncestralDiscreteScheduler, EulerDiscreteScheduler,
                       StableDiffusionXLImg2ImgPipeline, StableDiffusionXLInpaintPipeline, StableDiffusionXLPipeline,
                       UNet2DConditionModel)
from diffusers.pipelines.stable_diffusion_xl import pipeline_stable_diffusion_xl_img2img as i2i_mod
from diffusers.pipelines.stable_diffusion_xl import pipeline_stable_diffusion_xl_inpaint as inp_mod
from safetensors.torch import save_file
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_sd import ROOT, randomize, write_tiny_tokenizer  # noqa: E402

OUT = os.path.join(ROOT, "sdxl")
PROMPT = "a photograph of an astronaut riding a horse"
NEG = "blurry, low quality"
UNET_T = 500

# stabilityai/stable-diffusion-xl-base-1.0 scheduler/scheduler_config.json
SCHED_SDXL = {"beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
              "interpolation_type": "linear", "num_train_timesteps": 1000, "prediction_type": "epsilon",
              "sample_max_value": 1.0, "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
              "timestep_spacing": "leading", "trained_betas": None, "use_karras_sigmas": False}
# stabilityai/sdxl-turbo: Euler ancestral, trailing spacing
SCHED_TURBO = dict(SCHED_SDXL, timestep_spacing="trailing")


def text_encoders(vocab_size, tok1, tok2):
    cfg1 = CLIPTextConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                          num_attention_heads=4, max_position_embeddings=77, hidden_act="quick_gelu",
                          layer_norm_eps=1e-5, bos_token_id=vocab_size - 2, eos_token_id=vocab_size - 1,
                          pad_token_id=tok1.pad_token_id, projection_dim=32)
    cfg2 = CLIPTextConfig(vocab_size=vocab_size, hidden_size=48, intermediate_size=96, num_hidden_layers=3,
                          num_attention_heads=4, max_position_embeddings=77, hidden_act="gelu",
                          layer_norm_eps=1e-5, bos_token_id=vocab_size - 2, eos_token_id=vocab_size - 1,
                          pad_token_id=tok2.pad_token_id, projection_dim=40)
    te1 = randomize(CLIPTextModel(cfg1).eval(), 11)
    te2 = randomize(CLIPTextModelWithProjection(cfg2).eval(), 12)
    return te1, te2


def tiny_unet():
    # stabilityai/stable-diffusion-xl-base-1.0 unet/config.json with channels, heads, layers and size cut
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, center_input_sample=False, flip_sin_to_cos=True, freq_shift=0,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
        mid_block_type="UNetMidBlock2DCrossAttn", block_out_channels=(8, 16, 16), layers_per_block=2,
        downsample_padding=1, mid_block_scale_factor=1, act_fn="silu", norm_num_groups=4, norm_eps=1e-5,
        cross_attention_dim=80, transformer_layers_per_block=[1, 1, 2], attention_head_dim=[2, 2, 4],
        use_linear_projection=True, upcast_attention=None, addition_embed_type="text_time",
        addition_embed_type_num_heads=64, addition_time_embed_dim=8, projection_class_embeddings_input_dim=40 + 6 * 8,
        conv_in_kernel=3, conv_out_kernel=3, resnet_time_scale_shift="default", time_embedding_type="positional")
    return randomize(unet.eval(), 13, 0.1)


def tiny_vae():
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 3,
                        up_block_types=("UpDecoderBlock2D",) * 3, block_out_channels=(8, 16, 16), layers_per_block=2,
                        act_fn="silu", latent_channels=4, norm_num_groups=4, sample_size=32, scaling_factor=0.13025,
                        force_upcast=True)
    return randomize(vae.eval(), 14, 0.1)


def main():
    torch.manual_seed(0)
    tok1, vocab_size = write_tiny_tokenizer(os.path.join(OUT, "tokenizer"), "<|endoftext|>")
    tok2, _ = write_tiny_tokenizer(os.path.join(OUT, "tokenizer_2"), "!")
    te1, te2 = text_encoders(vocab_size, tok1, tok2)
    unet, vae = tiny_unet(), tiny_vae()
    pipe = StableDiffusionXLPipeline(vae=vae, text_encoder=te1, text_encoder_2=te2, tokenizer=tok1, tokenizer_2=tok2,
                                     unet=unet, scheduler=EulerDiscreteScheduler.from_config(SCHED_SDXL),
                                     force_zeros_for_empty_prompt=True)
    pipe.save_pretrained(OUT, safe_serialization=True)
    for sub in ("text_encoder", "text_encoder_2", "unet", "vae"):  # store f16 (the values are already f16-exact)
        comp = getattr(pipe, sub)
        comp.half().save_pretrained(os.path.join(OUT, sub), safe_serialization=True)
        comp.float()

    g = {}
    with torch.no_grad():
        ids1 = tok1(PROMPT, padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids
        ids2 = tok2(PROMPT, padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids
        g["ids1_cond"], g["ids2_cond"] = ids1.to(torch.int32), ids2.to(torch.int32)
        g["text1_penult"] = te1(ids1, output_hidden_states=True).hidden_states[-2]
        o2 = te2(ids2, output_hidden_states=True)
        g["text2_penult"], g["text2_pooled"] = o2.hidden_states[-2], o2.text_embeds
        c, _, p, _ = pipe.encode_prompt(PROMPT, do_classifier_free_guidance=False)
        g["context_cond"], g["pooled_cond"] = c, p
        c, _, p, _ = pipe.encode_prompt(NEG, do_classifier_free_guidance=False)
        g["context_neg"], g["pooled_neg"] = c, p

        gen = torch.Generator().manual_seed(42)
        g["unet_sample"] = torch.randn((2, 4, 8, 8), generator=gen)
        g["unet_context"] = torch.cat([g["context_neg"], g["context_cond"]])
        g["unet_text_embeds"] = torch.cat([g["pooled_neg"], g["pooled_cond"]])
        g["unet_time_ids"] = torch.tensor([[1024.0, 1024, 0, 0, 1024, 1024], [48, 64, 2, 3, 32, 32]])
        g["unet_out"] = unet(g["unet_sample"], UNET_T, encoder_hidden_states=g["unet_context"],
                             added_cond_kwargs={"text_embeds": g["unet_text_embeds"],
                                                "time_ids": g["unet_time_ids"]}).sample
        lat = torch.randn((1, 4, 8, 8), generator=gen)
        g["vae_latent"] = lat
        g["vae_image"] = vae.decode(lat / vae.config.scaling_factor).sample
        img = torch.rand((1, 3, 32, 32), generator=gen) * 2 - 1
        g["vae_enc_image"] = img
        g["vae_enc_mean"] = vae.encode(img).latent_dist.mean

        noise = torch.randn((1, 4, 8, 8), generator=gen)
        g["t2i_noise"] = noise
        g["t2i_latent"] = pipe(PROMPT, height=32, width=32, num_inference_steps=4, guidance_scale=5.0,
                               original_size=(48, 64), crops_coords_top_left=(2, 3), latents=noise.clone(),
                               output_type="latent").images
        g["t2i_neg_latent"] = pipe(PROMPT, negative_prompt=NEG, height=32, width=32, num_inference_steps=4,
                                   guidance_scale=5.0, latents=noise.clone(), output_type="latent").images
        turbo = StableDiffusionXLPipeline(**dict(pipe.components,
                                                 scheduler=EulerAncestralDiscreteScheduler.from_config(SCHED_TURBO)))
        g["turbo_latent"] = turbo(PROMPT, height=32, width=32, num_inference_steps=1, guidance_scale=0.0,
                                  latents=noise.clone(), output_type="latent").images

        # img2img / inpaint with the posterior mean and the recorded noise (as tools/goldens/make_tiny_sd_img2img.py)
        image = torch.rand((1, 3, 32, 32), generator=gen) * 2 - 1
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
        g["i2i_image"], g["inpaint_mask"] = image, mask
        i2i = StableDiffusionXLImg2ImgPipeline(**pipe.components, requires_aesthetics_score=False)
        g["i2i_latent"] = i2i(PROMPT, image=image, strength=0.5, num_inference_steps=4, guidance_scale=5.0,
                              output_type="latent").images
        inp = StableDiffusionXLInpaintPipeline(**pipe.components, requires_aesthetics_score=False)
        g["inpaint_latent"] = inp(PROMPT, image=image, mask_image=mask, strength=1.0, height=32, width=32,
                                  num_inference_steps=4, guidance_scale=5.0, output_type="latent").images
    save_file({k: v.contiguous() for k, v in g.items()}, os.path.join(OUT, "goldens.safetensors"))


if __name__ == "__main__":
    main()
