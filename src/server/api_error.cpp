#include "server/api_error.h"

namespace rbee::server {

ApiError::ApiError(int status, std::string code, std::string message, std::string param, int retry_after_s)
    : status_(status),
      code_(std::move(code)),
      message_(std::move(message)),
      param_(std::move(param)),
      retry_after_s_(retry_after_s) {}

nlohmann::json ApiError::body() const {
  const char* type = status_ == 401   ? "authentication_error"
                     : status_ == 429 ? "rate_limit_error"
                     : status_ >= 500 ? "server_error"
                                      : "invalid_request_error";
  nlohmann::json e = {{"code", code_}, {"message", message_}, {"type", type}};
  e["param"] = param_.empty() ? nlohmann::json(nullptr) : nlohmann::json(param_);
  return {{"error", e}};
}

ApiError invalid_field(const std::string& field, const std::string& what) {
  return ApiError(400, "invalid_request", "field '" + field + "': " + what, field);
}

std::string dump_json(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ApiError job_not_found(const std::string& id) {
  return ApiError(404, "job_not_found", "no job with id \"" + id + "\" (unknown, or already streamed)", "id");
}

}  // namespace rbee::server
