// Python str operations on UTF-8 strings, shared by the str methods and the string filters.
// Positions and widths count code points, as Python does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rbee::llm::jinja::str {

std::string capitalize(std::string_view s);  // str.capitalize
std::string title(std::string_view s);       // str.title (Jinja's `title` filter differs; see filters_text.cpp)
std::string swapcase(std::string_view s);
// str.replace(old, new, count); count < 0 replaces all.
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
// str.split / str.rsplit; sep null splits on runs of whitespace. maxsplit < 0 means no limit.
std::vector<std::string> split(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends = false);
std::string center(std::string_view s, int64_t width, char32_t fill);
std::string ljust(std::string_view s, int64_t width, char32_t fill);
std::string rjust(std::string_view s, int64_t width, char32_t fill);
std::string zfill(std::string_view s, int64_t width);
// Code-point index of the first/last occurrence of `sub`, or -1.
int64_t find(std::string_view s, std::string_view sub);
int64_t rfind(std::string_view s, std::string_view sub);
int64_t count(std::string_view s, std::string_view sub);

}  // namespace rbee::llm::jinja::str
