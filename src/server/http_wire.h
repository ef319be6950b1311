// The byte-level side of HttpServer that needs no event loop: blocking writes with a deadline on a non-blocking
// socket, the response head, chunked framing, and the URL pieces a request target carries.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include <httplib.h>

namespace rbee::server::wire {

// Writes all of data to the socket fd (non-blocking or not), waiting for it to drain; each wait for room ends
// after `stall` without progress. False when the peer is gone or stalled.
bool write_all(int fd, const char* data, size_t size, std::chrono::milliseconds stall);
inline bool write_all(int fd, std::string_view s, std::chrono::milliseconds stall) {
  return write_all(fd, s.data(), s.size(), stall);
}

// "HTTP/1.1 <status> <reason>\r\n<headers>\r\n": the response's own headers (Content-Length, Transfer-Encoding
// and Connection the handler may have set are replaced), then Content-Length (body_length) or, for a content
// provider, Transfer-Encoding: chunked, then Connection.
std::string response_head(const httplib::Response& res, size_t body_length, bool chunked, bool keep_alive);

// One chunk of a chunked body: "<hex size>\r\n<data>\r\n" (never called with an empty chunk: that ends the body).
std::string chunk_frame(const char* data, size_t size);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

// Percent-decoding of a path ("+" stays) or a query component ("+" is a space). Invalid escapes stay as they are.
std::string percent_decode(std::string_view s, bool plus_is_space);
// Splits "a=1&b=x%20y" into params (decoded).
void parse_query(std::string_view query, httplib::Params& params);

// The reason phrase of a status code ("OK", "Not Found", ...; "Unknown" for others).
const char* reason_phrase(int status);

}  // namespace rbee::server::wire
