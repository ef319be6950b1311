#include "llm/tokenizer/normalizer.h"

#include "rbee/core/error.h"

namespace rbee::llm {

void Normalizer::add_unicode(UnicodeForm form) {
  Step s{Step::Kind::Unicode};
  s.form = form;
  steps_.push_back(std::move(s));
}

void Normalizer::add_prepend(std::string prefix) {
  Step s{Step::Kind::Prepend};
  s.a = std::move(prefix);
  steps_.push_back(std::move(s));
}

void Normalizer::add_replace_literal(std::string from, std::string to) {
  RBEE_CHECK(!from.empty(), "tokenizer: a Replace normalizer needs a non-empty pattern");
  Step s{Step::Kind::ReplaceLiteral};
  s.a = std::move(from);
  s.b = std::move(to);
  steps_.push_back(std::move(s));
}

void Normalizer::add_replace_regex(std::string pattern, std::string to) {
  Step s{Step::Kind::ReplaceRegex};
  s.regex = std::make_shared<const text::Regex>(std::move(pattern));
  s.b = std::move(to);
  steps_.push_back(std::move(s));
}

void Normalizer::add_strip(bool left, bool right) {
  Step s{Step::Kind::Strip};
  s.left = left;
  s.right = right;
  steps_.push_back(std::move(s));
}

namespace {

// Unicode White_Space characters, which Strip removes (as Rust's char::is_whitespace).
size_t whitespace_len(std::string_view t, size_t pos) {
  static constexpr std::string_view kMulti[] = {
      "\xC2\x85", "\xC2\xA0", "\xE1\x9A\x80", "\xE2\x80\xA8", "\xE2\x80\xA9", "\xE2\x80\xAF", "\xE2\x81\x9F",
      "\xE3\x80\x80"};
  const char c = t[pos];
  if (c == ' ' || (c >= '\t' && c <= '\r')) return 1;
  for (std::string_view m : kMulti) {
    if (t.substr(pos).starts_with(m)) return m.size();
  }
  // U+2000..U+200A
  if (t.substr(pos).starts_with("\xE2\x80") && pos + 2 < t.size() && static_cast<uint8_t>(t[pos + 2]) >= 0x80 &&
      static_cast<uint8_t>(t[pos + 2]) <= 0x8A) {
    return 3;
  }
  return 0;
}

std::string strip(std::string_view t, bool left, bool right) {
  size_t b = 0, e = t.size();
  if (left) {
    while (b < e) {
      const size_t n = whitespace_len(t, b);
      if (n == 0) break;
      b += n;
    }
  }
  if (right) {
    // Walk forward to find where the trailing whitespace run starts.
    size_t pos = b, run_start = e;
    bool in_run = false;
    while (pos < e) {
      const size_t n = whitespace_len(t, pos);
      if (n > 0) {
        if (!in_run) run_start = pos;
        in_run = true;
        pos += n;
      } else {
        in_run = false;
        ++pos;
        while (pos < e && (static_cast<uint8_t>(t[pos]) & 0xC0) == 0x80) ++pos;
      }
    }
    if (in_run) e = run_start;
  }
  return std::string(t.substr(b, e - b));
}

}  // namespace

std::string Normalizer::run(std::string_view text) const {
  std::string cur(text);
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Step::Kind::Unicode:
        cur = text::unicode_normalize(cur, s.form);
        break;
      case Step::Kind::Prepend:
        if (!cur.empty()) cur.insert(0, s.a);
        break;
      case Step::Kind::ReplaceLiteral: {
        std::string out;
        size_t pos = 0;
        while (true) {
          const size_t hit = cur.find(s.a, pos);
          if (hit == std::string::npos) break;
          out.append(cur, pos, hit - pos);
          out += s.b;
          pos = hit + s.a.size();
        }
        out.append(cur, pos, std::string::npos);
        cur = std::move(out);
        break;
      }
      case Step::Kind::ReplaceRegex: {
        std::string out;
        size_t last = 0;
        s.regex->for_each_match(cur, [&](size_t b, size_t e) {
          out.append(cur, last, b - last);
          out += s.b;
          last = e;
        });
        out.append(cur, last, std::string::npos);
        cur = std::move(out);
        break;
      }
      case Step::Kind::Strip:
        cur = strip(cur, s.left, s.right);
        break;
    }
  }
  return cur;
}

}  // namespace rbee::llm
