#include "rbee/core/error.h"

namespace rbee {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument: return "InvalidArgument";
    case ErrorCode::NotFound: return "NotFound";
    case ErrorCode::Unsupported: return "Unsupported";
    case ErrorCode::OutOfMemory: return "OutOfMemory";
    case ErrorCode::Backend: return "Backend";
    case ErrorCode::Io: return "Io";
    case ErrorCode::Cancelled: return "Cancelled";
    case ErrorCode::Internal: return "Internal";
  }
  return "Unknown";
}

Error::Error(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) { rebuild_what(); }

Error& Error::add_context(std::string frame) {
  context_.push_back(std::move(frame));
  rebuild_what();
  return *this;
}

void Error::rebuild_what() {
  what_ = fmt::format("{}: {}", error_code_name(code_), message_);
  for (const auto& frame : context_) what_ += fmt::format(" (while: {})", frame);
}

namespace detail {
void throw_error(ErrorCode code, const char* file, int line, std::string message) {
  // Internal errors carry their source location: they are bugs and the location is what a developer needs.
  if (code == ErrorCode::Internal) message += fmt::format(" [{}:{}]", file, line);
  throw Error(code, std::move(message));
}
}  // namespace detail

}  // namespace rbee
