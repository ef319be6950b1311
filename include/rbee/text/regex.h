// A compiled PCRE2 pattern in UTF + UCP mode (so \p{L}, \p{N}, \s and lookahead follow Unicode), JIT-compiled
// when the platform supports it. Immutable after construction and safe to use from several threads.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "rbee/core/function_ref.h"

namespace rbee::text {

class Regex {
 public:
  // Throws Error(InvalidArgument) naming the pattern, the offset and PCRE2's reason when it does not compile.
  explicit Regex(std::string pattern);

  // Calls fn(begin, end) for every non-empty, non-overlapping match in `text`, left to right (byte offsets).
  // `text` must be valid UTF-8 (callers validate once at the API boundary).
  void for_each_match(std::string_view text, FunctionRef<void(size_t, size_t)> fn) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::shared_ptr<const Code> code_;
};

}  // namespace rbee::text
