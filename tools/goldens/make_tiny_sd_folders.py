"""A tiny SD 1.5-like pipeline with a 4-level UNet and a 4-level VAE (latent scale 8, as the real model), saved the
way real folders come, and goldens for odd sizes and PyTorch's generator; plus tiny UNets, one per config field.

tests/data/tiny_sd/sd15_l4/ (diffusers layout):
  unet/          sharded with diffusers' own index (diffusion_pytorch_model.safetensors.index.json + 8 shards)
  text_encoder/  sharded with transformers' index (model.safetensors.index.json + shards)
  vae/           diffusion_pytorch_model.fp16.safetensors (the pipeline's VAE) beside a plain
                 diffusion_pytorch_model.safetensors holding other weights: only variant "fp16" gives the goldens
  tokenizer/     tokenizer.json and tokenizer_config.json only (what transformers 5 writes)
  goldens.safetensors:
    unet_sample [2, 4, 5, 7], unet_context, unet_out    one UNet forward at t = 500 on odd latent sides
    t2i_noise, t2i_latent          4 steps Euler, guidance 7.5, 40x56 (latent 5x7), explicit noise
    t2i_tall_noise, t2i_tall_latent   the same at 104x24 (latent 13x3)
    torch_euler_a_latent           txt2img with generator=torch.Generator().manual_seed(1234), Euler ancestral,
                                   3 steps, guidance 7.5, 40x56: no explicit noise
    torch_ddim_latent              the same with DDIM made from the folder's scheduler config (linspace spacing, as
                                   written there), seed 77, 48x40
    torch_i2i_image, torch_i2i_latent   img2img with seed 9, strength 0.75, Euler, 4 steps (the posterior sampled
                                   with the generator, as diffusers does by default)
    torch_inpaint_mask, torch_inpaint_latent   inpaint of torch_i2i_image, seed 21, strength 1.0, Euler ancestral,
                                   3 steps (posterior, noise, masked-image posterior, step noises from the generator)
    plain_vae_image                decode of vae_latent with the plain (non-variant) VAE file
    vae_latent, vae_image          decode with the fp16 variant VAE
The goldens are computed by a pipeline whose components diffusers and transformers loaded back from these folders
(so the folders are known to load in diffusers as they are).

tests/data/tiny_sd/unet_fields/<name>/ (config.json + diffusion_pytorch_model.safetensors): 2-level UNets (8, 16
channels) with one config field away from its default each, and unet_fields/goldens.safetensors with sample
[2, 4, 5, 6], context [2, 7, 32] and <name>/out (t = 321).

Weights are rounded to f16 and stored as f16; goldens are computed in f32 from the stored values.
Run: /tmp/sdgold/bin/python tools/goldens/make_tiny_sd_folders.py (diffusers, transformers 5, torch CPU)
"""
import os
import shutil
import sys

import torch
from diffusers import (AutoencoderKL, DDIMScheduler, EulerAncestralDiscreteScheduler, EulerDiscreteScheduler,
                       StableDiffusionImg2ImgPipeline, StableDiffusionInpaintPipeline, StableDiffusionPipeline,
                       UNet2DConditionModel)
from safetensors.torch import save_file
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_sd import ROOT, SCHED_SD15, randomize  # noqa: E402

OUT = os.path.join(ROOT, "sd15_l4")
FIELDS = os.path.join(ROOT, "unet_fields")
PROMPT = "a photograph of an astronaut riding a horse"


def tiny_unet_l4():
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, center_input_sample=False, flip_sin_to_cos=True, freq_shift=0,
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        block_out_channels=(8, 16, 16, 16), layers_per_block=1, downsample_padding=1, mid_block_scale_factor=1,
        act_fn="silu", norm_num_groups=4, norm_eps=1e-5, cross_attention_dim=32, attention_head_dim=2)
    return randomize(unet.eval(), 21, 0.1)


def tiny_vae_l4(seed):
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
                        up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(8, 16, 16, 16),
                        layers_per_block=1, act_fn="silu", latent_channels=4, norm_num_groups=4, sample_size=64,
                        scaling_factor=0.18215)
    return randomize(vae.eval(), seed, 0.1)


def write_pipeline():
    shutil.rmtree(OUT, ignore_errors=True)
    tok = CLIPTokenizer.from_pretrained(os.path.join(ROOT, "sd15", "tokenizer"))
    vocab = len(tok.get_vocab())
    te_cfg = CLIPTextConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                            num_attention_heads=4, max_position_embeddings=77, hidden_act="quick_gelu",
                            layer_norm_eps=1e-5, bos_token_id=vocab - 2, eos_token_id=vocab - 1,
                            pad_token_id=tok.pad_token_id, projection_dim=32)
    te = randomize(CLIPTextModel(te_cfg).eval(), 22)
    unet, vae, other_vae = tiny_unet_l4(), tiny_vae_l4(23), tiny_vae_l4(24)
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=te, tokenizer=tok, unet=unet,
                                   scheduler=EulerDiscreteScheduler.from_config(SCHED_SD15), safety_checker=None,
                                   feature_extractor=None, requires_safety_checker=False)
    pipe.save_pretrained(OUT, safe_serialization=True)
    for sub in ("unet", "vae", "text_encoder"):
        shutil.rmtree(os.path.join(OUT, sub))
    unet.half().save_pretrained(os.path.join(OUT, "unet"), max_shard_size="40KB")
    te.half().save_pretrained(os.path.join(OUT, "text_encoder"), max_shard_size="50KB")
    vae.half().save_pretrained(os.path.join(OUT, "vae"), variant="fp16")
    other_vae.half().save_pretrained(os.path.join(OUT, "vae"))
    tok_dir = os.path.join(OUT, "tokenizer")
    assert sorted(os.listdir(tok_dir)) == ["tokenizer.json", "tokenizer_config.json"], os.listdir(tok_dir)
    assert os.path.exists(os.path.join(OUT, "unet", "diffusion_pytorch_model.safetensors.index.json"))
    assert os.path.exists(os.path.join(OUT, "text_encoder", "model.safetensors.index.json"))

    # Everything back from the folders, as diffusers and transformers read them.
    unet = UNet2DConditionModel.from_pretrained(os.path.join(OUT, "unet"), torch_dtype=torch.float32).eval()
    vae = AutoencoderKL.from_pretrained(os.path.join(OUT, "vae"), variant="fp16", torch_dtype=torch.float32).eval()
    plain_vae = AutoencoderKL.from_pretrained(os.path.join(OUT, "vae"), torch_dtype=torch.float32).eval()
    te = CLIPTextModel.from_pretrained(os.path.join(OUT, "text_encoder"), torch_dtype=torch.float32).eval()
    tok = CLIPTokenizer.from_pretrained(tok_dir)
    # The scheduler config as written to the folder (its timestep_spacing "linspace" then counts as given, so DDIM
    # made from it uses linspace, as DDIMScheduler.from_config(pipe.scheduler.config) of a loaded folder does).
    euler = EulerDiscreteScheduler.from_pretrained(os.path.join(OUT, "scheduler"))
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=te, tokenizer=tok, unet=unet, scheduler=euler,
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)

    g = {}
    with torch.no_grad():
        gen = torch.Generator().manual_seed(42)
        ids_c = tok(PROMPT, padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids
        ids_u = tok("", padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids
        context = torch.cat([te(ids_u)[0], te(ids_c)[0]])
        g["unet_sample"] = torch.randn((2, 4, 5, 7), generator=gen)
        g["unet_context"] = context
        g["unet_out"] = unet(g["unet_sample"], 500, encoder_hidden_states=context).sample
        g["vae_latent"] = torch.randn((1, 4, 5, 7), generator=gen)
        g["vae_image"] = vae.decode(g["vae_latent"] / vae.config.scaling_factor).sample
        g["plain_vae_image"] = plain_vae.decode(g["vae_latent"] / vae.config.scaling_factor).sample
        g["t2i_noise"] = torch.randn((1, 4, 5, 7), generator=gen)
        g["t2i_latent"] = pipe(PROMPT, height=40, width=56, num_inference_steps=4, guidance_scale=7.5,
                               latents=g["t2i_noise"].clone(), output_type="latent").images
        g["t2i_tall_noise"] = torch.randn((1, 4, 13, 3), generator=gen)
        g["t2i_tall_latent"] = pipe(PROMPT, height=104, width=24, num_inference_steps=4, guidance_scale=7.5,
                                    latents=g["t2i_tall_noise"].clone(), output_type="latent").images
        anc = StableDiffusionPipeline(**dict(pipe.components,
                                             scheduler=EulerAncestralDiscreteScheduler.from_config(euler.config)))
        g["torch_euler_a_latent"] = anc(PROMPT, height=40, width=56, num_inference_steps=3, guidance_scale=7.5,
                                        generator=torch.Generator().manual_seed(1234), output_type="latent").images
        # As rbee builds sampler X: X.from_config(the folder's scheduler config).
        ddim = StableDiffusionPipeline(**dict(pipe.components, scheduler=DDIMScheduler.from_config(euler.config)))
        g["torch_ddim_latent"] = ddim(PROMPT, height=48, width=40, num_inference_steps=3, guidance_scale=7.5,
                                      generator=torch.Generator().manual_seed(77), output_type="latent").images
        image = torch.rand((1, 3, 40, 56), generator=gen) * 2 - 1
        g["torch_i2i_image"] = image
        i2i = StableDiffusionImg2ImgPipeline(**pipe.components)
        g["torch_i2i_latent"] = i2i(PROMPT, image=image, strength=0.75, num_inference_steps=4, guidance_scale=7.5,
                                    generator=torch.Generator().manual_seed(9), output_type="latent").images
        # Inpaint (strength 1.0, diffusers' default) with Euler ancestral: the generator draws the image's posterior,
        # the noise, the masked image's posterior, then one noise per step.
        mask = torch.zeros((1, 1, 40, 56))
        mask[:, :, 8:32, 16:48] = 1.0
        g["torch_inpaint_mask"] = mask
        inp = StableDiffusionInpaintPipeline(**dict(pipe.components,
                                                    scheduler=EulerAncestralDiscreteScheduler.from_config(euler.config)))
        g["torch_inpaint_latent"] = inp(PROMPT, image=image, mask_image=mask, height=40, width=56,
                                        num_inference_steps=3, guidance_scale=7.5,
                                        generator=torch.Generator().manual_seed(21), output_type="latent").images
    save_file({k: v.contiguous() for k, v in g.items()}, os.path.join(OUT, "goldens.safetensors"))


# One config field away from its default per UNet (the base is a 2-level UNet with 8, 16 channels).
FIELD_CASES = {
    "center_input_sample": {"center_input_sample": True},
    "mid_block_scale_factor": {"mid_block_scale_factor": 1.414},
    "scale_shift": {"resnet_time_scale_shift": "scale_shift"},
    "time_embedding_dim": {"time_embedding_dim": 24},
    "conv_kernels": {"conv_in_kernel": 1, "conv_out_kernel": 5},
    "mid_plain": {"mid_block_type": "UNetMidBlock2D"},
    "mid_none": {"mid_block_type": None},
    "downsample_padding_0": {"downsample_padding": 0},
    "sinusoid": {"flip_sin_to_cos": False, "freq_shift": 1},
    "no_effect": {"upcast_attention": True, "dropout": 0.1, "resnet_skip_time_act": True,
                  "resnet_out_scale_factor": 2.0, "cross_attention_norm": "group_norm"},
}


def write_unet_fields():
    shutil.rmtree(FIELDS, ignore_errors=True)
    gen = torch.Generator().manual_seed(5)
    sample = torch.randn((2, 4, 5, 6), generator=gen)
    context = torch.randn((2, 7, 32), generator=gen)
    g = {"sample": sample, "context": context}
    for i, (name, fields) in enumerate(FIELD_CASES.items()):
        cfg = dict(sample_size=8, block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4,
                   down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                   up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32, attention_head_dim=2)
        cfg.update(fields)
        unet = randomize(UNet2DConditionModel(**cfg).eval(), 100 + i, 0.1)
        d = os.path.join(FIELDS, name)
        unet.half().save_pretrained(d)
        unet = UNet2DConditionModel.from_pretrained(d, torch_dtype=torch.float32).eval()
        with torch.no_grad():
            g[name + "/out"] = unet(sample, 321, encoder_hidden_states=context).sample
    save_file({k: v.contiguous() for k, v in g.items()}, os.path.join(FIELDS, "goldens.safetensors"))


def main():
    torch.manual_seed(0)
    write_pipeline()
    write_unet_fields()


if __name__ == "__main__":
    main()
