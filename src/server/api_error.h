// ApiError: a request the worker refuses, with the HTTP status and the body docs/DESIGN.md section 5 fixes:
// {"error":{"code","message","param"?}}. Route handlers throw it; HttpServer turns it into the response.
#pragma once

#include <exception>
#include <string>

#include <nlohmann/json.hpp>

namespace rbee::server {

class ApiError : public std::exception {
 public:
  // status: 4xx for client mistakes, 429/503 for overload (retry_after_s > 0 adds Retry-After), 5xx for faults.
  // param: the request field at fault ("" when none), also named in the message.
  ApiError(int status, std::string code, std::string message, std::string param = "", int retry_after_s = 0);

  int status() const noexcept { return status_; }
  const std::string& code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  const std::string& param() const noexcept { return param_; }
  int retry_after_s() const noexcept { return retry_after_s_; }
  const char* what() const noexcept override { return message_.c_str(); }

  // {"error":{"code","message","type","param"}}: the design's two keys plus the two OpenAI clients read.
  nlohmann::json body() const;

 private:
  int status_;
  std::string code_, message_, param_;
  int retry_after_s_;
};

// Shorthand for the common 400 naming a field.
ApiError invalid_field(const std::string& field, const std::string& what);

// 404 job_not_found for a job id the worker does not hold (unknown, or its stream already ended).
ApiError job_not_found(const std::string& id);

// JSON text that never throws: invalid UTF-8 (which our own strings never hold) is replaced with U+FFFD.
std::string dump_json(const nlohmann::json& value);

}  // namespace rbee::server
