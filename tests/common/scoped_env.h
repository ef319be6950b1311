// ScopedEnv: sets an environment variable for a scope (code under test that reads it at each call sees the new
// value) and restores the old value, or unsets it, when the scope ends.
#pragma once

#include <cstdlib>
#include <string>
#include <utility>

namespace rbee::test {

class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::string& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old, had_ = true;
    ::setenv(name_.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

// RBEE_BATCH_INVARIANT=1 or 0 for the scope (the kernels read it at each call).
class ScopedInvariant : public ScopedEnv {
 public:
  explicit ScopedInvariant(bool on) : ScopedEnv("RBEE_BATCH_INVARIANT", on ? "1" : "0") {}
};

}  // namespace rbee::test
