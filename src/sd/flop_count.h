// Counting the arithmetic of SD layers as they run: nn::Linear, nn::Conv2d and nn::mha add their multiply-adds
// (2 flops each: 2 M N K for a product, 2 x output elements x Cin k k for a convolution, 4 B Tq Tk C for attention's
// Q K^T and P V) to the calling thread's innermost live FlopCounter, and to nothing when none is live (one
// thread-local test per layer call). Norms, activations and copies are not counted: they are memory traffic, not
// the arithmetic a GEMM rate bounds. Layers that are replayed inside a device graph do not run on the host and are
// not counted: count an eager or a recording step.
#pragma once

namespace rbee::sd {

class FlopCounter {
 public:
  FlopCounter();  // becomes the thread's innermost counter until destroyed
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;

  double total() const { return total_; }
  // Adds to the thread's innermost live counter, if any.
  static void add(double flops);

 private:
  FlopCounter* outer_;
  double total_ = 0;
};

}  // namespace rbee::sd
