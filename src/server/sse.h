// Server-Sent Events framing (WHATWG HTML, "server-sent events"): one event is "field: value" lines ended by a
// blank line. The rbee contract sends one JSON per `data:` line and ends with `data: [DONE]`; the SD worker
// names its events (`event: progress`).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace rbee::server {

inline constexpr const char* kSseContentType = "text/event-stream";

// "data: <json>\n\n" (JSON text never contains a raw newline, so one data line holds it).
std::string sse_data(const nlohmann::json& payload);
// "data: <text>\n\n"; text with newlines is split over several data lines, as the format requires.
std::string sse_data_text(std::string_view text);
// "event: <name>\ndata: <json>\n\n"
std::string sse_event(std::string_view name, const nlohmann::json& payload);
// ": <text>\n\n", a comment clients ignore; sent while idle so a closed connection is noticed.
std::string sse_comment(std::string_view text);
inline std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace rbee::server
