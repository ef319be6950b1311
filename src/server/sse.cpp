#include "server/sse.h"

#include "server/api_error.h"

namespace rbee::server {

std::string sse_data(const nlohmann::json& payload) { return "data: " + dump_json(payload) + "\n\n"; }

std::string sse_data_text(std::string_view text) {
  std::string out;
  size_t start = 0;
  while (true) {
    const size_t nl = text.find('\n', start);
    out += "data: ";
    out += text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    out += '\n';
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  out += '\n';
  return out;
}

std::string sse_event(std::string_view name, const nlohmann::json& payload) {
  std::string out = "event: ";
  out += name;
  out += '\n';
  return out + sse_data(payload);
}

std::string sse_comment(std::string_view text) {
  std::string out = ": ";
  out += text;
  return out + "\n\n";
}

}  // namespace rbee::server
