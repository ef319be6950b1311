#include "rbee/text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "rbee/core/error.h"

namespace rbee::text {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? fmt::format("PCRE2 error {}", code) : std::string(reinterpret_cast<const char*>(buf));
}

// Per-thread match state: the match data block and a JIT stack large enough for long runs of letters or
// spaces (the default 32 KiB stack fails on pathological inputs such as megabytes of one character class).
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(std::string pattern) : pattern_(std::move(pattern)) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  auto code = std::make_shared<Code>();
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                             PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  RBEE_CHECK(code->code != nullptr, "tokenizer: pre-tokenizer regex '{}' does not compile at offset {}: {}",
             pattern_, err_offset, pcre2_message(err));
  // JIT is an optimisation: where it is unavailable pcre2_match interprets the pattern instead.
  (void)pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE);
  code_ = std::move(code);
}

void Regex::for_each_match(std::string_view text, FunctionRef<void(size_t, size_t)> fn) const {
  MatchState& st = match_state();
  RBEE_CHECK_CODE(st.data != nullptr && st.context != nullptr, ErrorCode::OutOfMemory,
                  "tokenizer: cannot allocate PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc = pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    RBEE_CHECK(rc >= 0, "tokenizer: regex '{}' failed at byte {}: {}", pattern_, pos, pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const size_t begin = ov[0], end = ov[1];
    if (end > begin) {
      fn(begin, end);
      pos = end;
    } else {
      // An empty match: step over one character so the scan always advances.
      pos = begin + 1;
      while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
}

}  // namespace rbee::text
