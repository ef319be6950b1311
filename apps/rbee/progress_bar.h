// A one-line progress bar on stderr, redrawn in place ("label [####    ]  42% suffix"); nothing when stderr is
// not a terminal, so logs and pipes stay clean.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

namespace rbee::cli {

class ProgressBar {
 public:
  ProgressBar(bool enabled, std::string label) : enabled_(enabled && isatty(STDERR_FILENO)), label_(std::move(label)) {}
  // fraction in [0, 1]; the line ends at 1.
  void update(float fraction, const std::string& suffix = "") {
    if (!enabled_) return;
    const int width = 40, filled = (int)(fraction * width + 0.5f);
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %s", label_.c_str(), filled, "########################################",
                 width - filled, "", (int)(fraction * 100 + 0.5f), suffix.c_str());
    std::fflush(stderr);
    if (fraction >= 1.0f) std::fprintf(stderr, "\n");
  }

 private:
  bool enabled_;
  std::string label_;
};

}  // namespace rbee::cli
