"""The diffusers peer of rbee_sd_bench --random-sd15 / --random-sdxl: full-size SD 1.5 (or, with --sdxl, SDXL base)
architecture with random weights.

Builds UNet2DConditionModel, AutoencoderKL and CLIPTextModel from the SD 1.5 configs (the same ones
rbee::sd::PipelineSpec::sd15 holds), random init, fp16 on the GPU by default, and times txt2img
(Euler, guidance 7.5) at the given size and steps. Random weights make the images noise; the timing is what counts.

  python tools/bench/sd_bench_diffusers.py --steps 20 --width 512 --height 512 --runs 3
  ./build/cuda/rbee_sd_bench --random-sd15 --backend cuda --f16 --steps 20 --width 512 --height 512 --runs 3
  python tools/bench/sd_bench_diffusers.py --sdxl --steps 20 --width 1024 --height 1024 --guidance 5 --runs 3
  python tools/bench/sd_bench_diffusers.py --modes eager,compiled --steps 20 --width 512 --height 512 --runs 3

--modes compiled is the strongest setup PyTorch offers a diffusers user: UNet and VAE in channels-last memory format,
the UNet and the VAE decoder under torch.compile(mode="reduce-overhead", fullgraph=True) (CUDA graphs). Its first
call compiles: that time is reported apart ("compile+first image") and never enters the steady-state mean (nor do
the further --compile-warmup calls that let the CUDA graphs settle). Several modes share one loaded pipeline, eager
first.
  ./build/cuda/rbee_sd_bench --random-sdxl --backend cuda --f16 --steps 20 --width 1024 --height 1024 --guidance 5

--gate-file PATH (for a call that compiles several peers side by side, tools/bench/sd_ab_call.sh's stage peers_bg):
after the compiling call (the first image, which also records the CUDA graphs) the script writes PATH.ready and waits
until PATH exists before its untimed warm-up calls and timed runs; at the end it writes PATH.done. The caller opens
one gate at a time, so no timed run shares the GPU with another process's work.

Needs torch (CUDA build on a GPU box) and diffusers, transformers (tools/requirements-goldens.txt).
"""
import argparse
import os
import time

import torch
from diffusers import (AutoencoderKL, EulerDiscreteScheduler, StableDiffusionPipeline, StableDiffusionXLPipeline,
                       UNet2DConditionModel)
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = os.path.join(HERE, "..", "..", "tests", "data", "tiny_sd", "sd15", "tokenizer")

UNET = dict(act_fn="silu", attention_head_dim=8, block_out_channels=(320, 640, 1280, 1280), center_input_sample=False,
            cross_attention_dim=768,
            down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
            downsample_padding=1, flip_sin_to_cos=True, freq_shift=0, in_channels=4, layers_per_block=2,
            mid_block_scale_factor=1, norm_eps=1e-5, norm_num_groups=32, out_channels=4, sample_size=64,
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"))
VAE = dict(act_fn="silu", block_out_channels=(128, 256, 512, 512), down_block_types=("DownEncoderBlock2D",) * 4,
           in_channels=3, latent_channels=4, layers_per_block=2, norm_num_groups=32, out_channels=3, sample_size=512,
           scaling_factor=0.18215, up_block_types=("UpDecoderBlock2D",) * 4)
TEXT = dict(hidden_act="quick_gelu", hidden_size=768, intermediate_size=3072, max_position_embeddings=77,
            num_attention_heads=12, num_hidden_layers=12, vocab_size=49408, layer_norm_eps=1e-5, projection_dim=768)
SCHED = dict(beta_end=0.012, beta_schedule="scaled_linear", beta_start=0.00085, num_train_timesteps=1000,
             steps_offset=1, prediction_type="epsilon")

# SDXL base (the configs rbee::sd::PipelineSpec::sdxl holds)
TOKENIZER_2 = os.path.join(HERE, "..", "..", "tests", "data", "tiny_sd", "sdxl", "tokenizer_2")
UNET_XL = dict(act_fn="silu", addition_embed_type="text_time", addition_embed_type_num_heads=64,
               addition_time_embed_dim=256, attention_head_dim=(5, 10, 20), block_out_channels=(320, 640, 1280),
               center_input_sample=False, cross_attention_dim=2048,
               down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"), downsample_padding=1,
               flip_sin_to_cos=True, freq_shift=0, in_channels=4, layers_per_block=2, mid_block_scale_factor=1,
               norm_eps=1e-5, norm_num_groups=32, out_channels=4, projection_class_embeddings_input_dim=2816,
               sample_size=128, transformer_layers_per_block=(1, 2, 10),
               up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"), use_linear_projection=True)
# force_upcast False: the VAE decodes in fp16 as rbee's does (the setup of the fp16-fixed SDXL VAE that fast users run;
# the base VAE's True would cast the whole VAE to f32 and back around every decode).
VAE_XL = dict(VAE, sample_size=1024, scaling_factor=0.13025, force_upcast=False)
TEXT_XL_2 = dict(hidden_act="gelu", hidden_size=1280, intermediate_size=5120, max_position_embeddings=77,
                 num_attention_heads=20, num_hidden_layers=32, vocab_size=49408, layer_norm_eps=1e-5,
                 projection_dim=1280)
SCHED_XL = dict(SCHED, timestep_spacing="leading")


def tokenizer(folder, pad):
    return CLIPTokenizer(os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt"), pad_token=pad,
                         model_max_length=77)


def build_pipeline(sdxl, device):
    """The pipeline with random weights (f32): the models' weights drawn on `device` (seconds instead of minutes of
    CPU init for SDXL's 3.5 B values); the scheduler's tables stay on the CPU, where diffusers keeps them."""
    with torch.device(device):
        if sdxl:
            models = dict(vae=AutoencoderKL(**VAE_XL), text_encoder=CLIPTextModel(CLIPTextConfig(**TEXT)),
                          text_encoder_2=CLIPTextModelWithProjection(CLIPTextConfig(**TEXT_XL_2)),
                          unet=UNet2DConditionModel(**UNET_XL))
        else:
            models = dict(vae=AutoencoderKL(**VAE), text_encoder=CLIPTextModel(CLIPTextConfig(**TEXT)),
                          unet=UNet2DConditionModel(**UNET))
    if sdxl:
        return StableDiffusionXLPipeline(tokenizer=tokenizer(TOKENIZER, "<|endoftext|>"),
                                         tokenizer_2=tokenizer(TOKENIZER_2, "!"),
                                         scheduler=EulerDiscreteScheduler(**SCHED_XL), **models)
    return StableDiffusionPipeline(
        tokenizer=CLIPTokenizer(os.path.join(TOKENIZER, "vocab.json"), os.path.join(TOKENIZER, "merges.txt"),
                                model_max_length=77),
        scheduler=EulerDiscreteScheduler(**SCHED), safety_checker=None, feature_extractor=None,
        requires_safety_checker=False, **models)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="float16", choices=["float16", "float32"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--height", type=int, default=512)
    ap.add_argument("--guidance", type=float, default=7.5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sdxl", action="store_true", help="SDXL base instead of SD 1.5")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--modes", default="eager",
                    help="comma-separated: eager, compiled (channels-last + torch.compile(mode='reduce-overhead', "
                         "fullgraph=True) on UNet and VAE decoder)")
    ap.add_argument("--compile-warmup", type=int, default=2, help="calls after the compiling one, not timed")
    ap.add_argument("--gate-file", default="", help="after the first call: write PATH.ready, wait for PATH, "
                    "write PATH.done at the end (see the module text)")
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    pipe = build_pipeline(a.sdxl, a.device).to(a.device, dtype)
    pipe.set_progress_bar_config(disable=True)
    print(f"load: {time.perf_counter() - t0:.2f} s on {a.device} ({a.dtype}, torch {torch.__version__})", flush=True)
    for mode in a.modes.split(","):
        if mode == "compiled":
            pipe.unet.to(memory_format=torch.channels_last)
            pipe.vae.to(memory_format=torch.channels_last)
            pipe.unet = torch.compile(pipe.unet, mode="reduce-overhead", fullgraph=True)
            pipe.vae.decode = torch.compile(pipe.vae.decode, mode="reduce-overhead", fullgraph=True)
            warmup = 1 + a.compile_warmup
        elif mode == "eager":
            warmup = a.warmup
        else:
            raise SystemExit(f"unknown mode {mode!r} (eager, compiled)")
        times = []
        for i in range(warmup + a.runs):
            if i == 1 and a.gate_file and not os.path.exists(a.gate_file + ".ready"):
                wait_for_gate(a.gate_file)  # once, in the first mode (meant for --modes compiled)
            if a.device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            pipe("a photograph of an astronaut riding a horse", num_inference_steps=a.steps,
                 guidance_scale=a.guidance, width=a.width, height=a.height,
                 generator=torch.Generator(a.device).manual_seed(42), output_type="np")
            if a.device == "cuda":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t
            kind = "run" if i >= warmup else ("compile+first image" if mode == "compiled" and i == 0 else "warmup")
            print(f"{mode} {kind} {i}: {dt:.3f} s/image", flush=True)
            if i >= warmup:
                times.append(dt)
        if times:
            print(f"result: {mode}, {a.width}x{a.height}, {a.steps} steps, euler, guidance {a.guidance}, {a.dtype}: "
                  f"mean {sum(times) / len(times):.3f} s/image, best {min(times):.3f} s/image", flush=True)
    if a.gate_file:
        open(a.gate_file + ".done", "w").close()


def wait_for_gate(path):
    """Says the first call is over (PATH.ready) and waits until the caller creates PATH."""
    open(path + ".ready", "w").close()
    t = time.perf_counter()
    while not os.path.exists(path):
        time.sleep(0.05)
    print(f"gate {path} opened after {time.perf_counter() - t:.1f} s of waiting", flush=True)


if __name__ == "__main__":
    main()
