// rbee_sd_bench --attention: the attention calls of SD 1.5 (512x512) and SDXL (1024x1024) UNets, both guidance
// halves, with q / k / v and out as nn::mha passes them (head views of [B, T, H * D] tensors), timed alone. The GPU
// backends log each shape's path (cuDNN or rbee's kernels) at debug level, switched on here unless RBEE_LOG_LEVEL
// is set.
#pragma once

namespace rbee {
class Device;
}

// Prints one row per shape: microseconds a call and TFLOP/s of 4 Tq Tk D per head (QK^T and PV).
void run_sd_attention_bench(rbee::Device& device);
