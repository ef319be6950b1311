// rbee::Error: the one exception type of the engine.
//
// Every failure is an Error with a category (what kind of failure, so the server can pick a status code),
// a message, and a context chain (outermost last) that callers add while the error unwinds:
//   "shape mismatch [2,3] vs [3,2] (while: ops::add) (while: layer 3 attention)".
// RBEE_CHECK is for bad input from a caller; RBEE_ASSERT for broken internal invariants. Neither aborts.
#pragma once

#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace rbee {

enum class ErrorCode {
  InvalidArgument,  // the caller passed something wrong (shape, dtype, index, request field)
  NotFound,         // a file, tensor, backend or key that does not exist
  Unsupported,      // valid request that this build/backend/dtype cannot do
  OutOfMemory,      // host or device allocation failed
  Backend,          // a vendor runtime call failed
  Io,               // reading or writing a file or socket failed; malformed files
  Cancelled,        // the work was cancelled by its owner
  Internal,         // an invariant of rbee itself broke (a bug)
};

const char* error_code_name(ErrorCode code);

class Error : public std::exception {
 public:
  Error(ErrorCode code, std::string message);

  ErrorCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  // Context frames, innermost first.
  const std::vector<std::string>& context() const noexcept { return context_; }
  // Adds a context frame (the error keeps its category) and returns *this so it can be rethrown.
  Error& add_context(std::string frame);

  // "<Code>: <message> (while: ctx0) (while: ctx1)"
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  void rebuild_what();
  ErrorCode code_;
  std::string message_;
  std::vector<std::string> context_;
  std::string what_;
};

namespace detail {
[[noreturn]] void throw_error(ErrorCode code, const char* file, int line, std::string message);
}  // namespace detail

}  // namespace rbee

// Throws rbee::Error(code, formatted message). The format string follows fmt.
#define RBEE_THROW(code, ...) ::rbee::detail::throw_error((code), __FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

// Input validation: throws InvalidArgument (or the given code) when cond is false.
#define RBEE_CHECK(cond, ...)                                                        \
  do {                                                                               \
    if (!(cond)) RBEE_THROW(::rbee::ErrorCode::InvalidArgument, __VA_ARGS__);       \
  } while (0)
#define RBEE_CHECK_CODE(cond, code, ...)        \
  do {                                          \
    if (!(cond)) RBEE_THROW((code), __VA_ARGS__); \
  } while (0)

// Internal invariant: throws Internal with the failed condition's text.
#define RBEE_ASSERT(cond, ...)                                                                   \
  do {                                                                                           \
    if (!(cond))                                                                                 \
      RBEE_THROW(::rbee::ErrorCode::Internal, "internal assertion '{}' failed: {}", #cond,       \
                 ::fmt::format(__VA_ARGS__));                                                    \
  } while (0)

// Runs `stmt`; if it throws rbee::Error, adds the context frame and rethrows.
#define RBEE_WITH_CONTEXT(frame_expr, stmt)         \
  do {                                              \
    try {                                           \
      stmt;                                         \
    } catch (::rbee::Error & rbee_err_) {           \
      rbee_err_.add_context(frame_expr);            \
      throw;                                        \
    }                                               \
  } while (0)
