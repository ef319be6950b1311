#include "llm/chat/str_methods.h"

#include "llm/chat/ops.h"
#include "llm/chat/utf8.h"

namespace rbee::llm::jinja::str {

std::string capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::next(s, i);
    if (first && c == 0xDF) {
      out += "Ss";
    } else {
      utf8::append(out, first ? utf8::to_upper(c) : utf8::to_lower(c));
    }
    first = false;
  }
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::next(s, i);
    const bool cased = utf8::is_cased(c);
    if (cased && !prev_cased && c == 0xDF) {
      out += "Ss";
    } else {
      utf8::append(out, cased ? (prev_cased ? utf8::to_lower(c) : utf8::to_upper(c)) : c);
    }
    prev_cased = cased;
  }
  return out;
}

std::string swapcase(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::next(s, i);
    if (c == 0xDF) {
      out += "SS";
    } else {
      utf8::append(out, utf8::is_upper(c) ? utf8::to_lower(c) : utf8::to_upper(c));
    }
  }
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `repl` before every character and at the end
    int64_t done = 0;
    size_t i = 0;
    while (i <= s.size()) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i == s.size()) break;
      const size_t from = i;
      utf8::next(s, i);
      out.append(s.substr(from, i - from));
      check_string_size(out.size());
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(repl);
    check_string_size(out.size());
    pos = hit + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  check_string_size(out.size());
  return out;
}

namespace {

// Splits on whitespace runs from the left; Python's str.split(None, maxsplit).
std::vector<std::string> split_ws(std::string_view s, int64_t maxsplit) {
  std::vector<std::string> out;
  size_t i = 0;
  auto skip_ws = [&]() {
    while (i < s.size()) {
      size_t j = i;
      if (!utf8::is_space(utf8::next(s, j))) break;
      i = j;
    }
  };
  skip_ws();
  while (i < s.size()) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.emplace_back(s.substr(i));  // the rest keeps its trailing whitespace, as in Python
      return out;
    }
    const size_t start = i;
    while (i < s.size()) {
      size_t j = i;
      if (utf8::is_space(utf8::next(s, j))) break;
      i = j;
    }
    out.emplace_back(s.substr(start, i - start));
    skip_ws();
  }
  return out;
}

}  // namespace

std::vector<std::string> split(std::string_view s, const std::string* sep, int64_t maxsplit) {
  if (!sep) return split_ws(s, maxsplit);
  if (sep->empty()) throw Error(ErrorCode::InvalidArgument, "empty separator");
  std::vector<std::string> out;
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    const size_t hit = s.find(*sep, pos);
    if (hit == std::string_view::npos) break;
    out.emplace_back(s.substr(pos, hit - pos));
    pos = hit + sep->size();
  }
  out.emplace_back(s.substr(pos));
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, -1);
  std::vector<std::string> out;
  if (!sep) {
    // Python's rsplit(None, n): split from the right on whitespace runs.
    std::vector<char32_t> cps = utf8::decode(s);
    size_t end = cps.size();
    while (end > 0 && utf8::is_space(cps[end - 1])) --end;
    while (end > 0) {
      if (static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(utf8::encode(std::vector<char32_t>(cps.begin(), cps.begin() + static_cast<std::ptrdiff_t>(end))));
        break;  // the rest keeps its leading whitespace, as in Python
      }
      size_t start = end;
      while (start > 0 && !utf8::is_space(cps[start - 1])) --start;
      out.push_back(utf8::encode(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(start),
                                                       cps.begin() + static_cast<std::ptrdiff_t>(end))));
      end = start;
      while (end > 0 && utf8::is_space(cps[end - 1])) --end;
    }
    return {out.rbegin(), out.rend()};
  }
  if (sep->empty()) throw Error(ErrorCode::InvalidArgument, "empty separator");
  size_t end = s.size();
  while (static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep->size()) break;
    const size_t hit = s.rfind(*sep, end - sep->size());
    if (hit == std::string_view::npos) break;
    out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
    end = hit;
  }
  out.emplace_back(s.substr(0, end));
  return {out.rbegin(), out.rend()};
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const char32_t c = utf8::next(s, i);
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    size_t end = i;
    if (c == '\r' && i < s.size() && s[i] == '\n') end = ++i;
    out.emplace_back(s.substr(start, (keepends ? end : at) - start));
    start = end;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

namespace {
std::string repeat_fill(char32_t fill, int64_t n) {
  std::string f;
  utf8::append(f, fill);
  std::string out;
  for (int64_t i = 0; i < n; ++i) out += f;
  return out;
}
void check_width(int64_t width) {
  if (width > static_cast<int64_t>(kMaxStringBytes)) check_string_size(kMaxStringBytes + 1);
}
}  // namespace

std::string center(std::string_view s, int64_t width, char32_t fill) {
  check_width(width);
  const auto len = static_cast<int64_t>(utf8::length(s));
  const int64_t marg = width - len;
  if (marg <= 0) return std::string(s);
  const int64_t left = marg / 2 + (marg & width & 1);
  return repeat_fill(fill, left) + std::string(s) + repeat_fill(fill, marg - left);
}

std::string ljust(std::string_view s, int64_t width, char32_t fill) {
  check_width(width);
  const int64_t marg = width - static_cast<int64_t>(utf8::length(s));
  return marg <= 0 ? std::string(s) : std::string(s) + repeat_fill(fill, marg);
}

std::string rjust(std::string_view s, int64_t width, char32_t fill) {
  check_width(width);
  const int64_t marg = width - static_cast<int64_t>(utf8::length(s));
  return marg <= 0 ? std::string(s) : repeat_fill(fill, marg) + std::string(s);
}

std::string zfill(std::string_view s, int64_t width) {
  check_width(width);
  const int64_t marg = width - static_cast<int64_t>(utf8::length(s));
  if (marg <= 0) return std::string(s);
  const size_t sign = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  return std::string(s.substr(0, sign)) + std::string(static_cast<size_t>(marg), '0') + std::string(s.substr(sign));
}

int64_t find(std::string_view s, std::string_view sub) {
  const size_t hit = s.find(sub);
  return hit == std::string_view::npos ? -1 : static_cast<int64_t>(utf8::length(s.substr(0, hit)));
}

int64_t rfind(std::string_view s, std::string_view sub) {
  const size_t hit = s.rfind(sub);
  return hit == std::string_view::npos ? -1 : static_cast<int64_t>(utf8::length(s.substr(0, hit)));
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8::length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

}  // namespace rbee::llm::jinja::str
