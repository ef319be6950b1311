#include "llm/tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "rbee/text/byte_level.h"
#include "rbee/core/error.h"

namespace rbee::llm {
namespace {

std::string quote_literal(std::string_view literal) {
  // \Q...\E quotes everything but a literal "\E", which is spliced in escaped.
  std::string out = "\\Q";
  size_t pos = 0;
  while (true) {
    const size_t e = literal.find("\\E", pos);
    if (e == std::string_view::npos) break;
    out.append(literal.substr(pos, e - pos));
    out += "\\E\\\\E\\Q";
    pos = e + 2;
  }
  out.append(literal.substr(pos));
  out += "\\E";
  return out;
}

struct Segment {
  size_t begin, end;
  bool is_match;
};

}  // namespace

void PreTokenizer::add_split(std::string pattern, SplitBehavior behavior, bool invert) {
  Step s;
  s.kind = Step::Kind::Split;
  s.regex = std::make_shared<const text::Regex>(std::move(pattern));
  s.behavior = behavior;
  s.invert = invert;
  steps_.push_back(std::move(s));
}

void PreTokenizer::add_split_literal(std::string_view literal, SplitBehavior behavior, bool invert) {
  RBEE_CHECK(!literal.empty(), "tokenizer: a Split pre-tokenizer needs a non-empty pattern");
  add_split(quote_literal(literal), behavior, invert);
}

void PreTokenizer::add_byte_level(bool add_prefix_space, bool use_regex) {
  if (add_prefix_space) {
    Step s;
    s.kind = Step::Kind::ByteLevelPrefix;
    steps_.push_back(std::move(s));
  }
  if (use_regex) add_split(std::string(regexes::kGpt2), SplitBehavior::Isolated);
  Step s;
  s.kind = Step::Kind::ByteLevelMap;
  steps_.push_back(std::move(s));
}

void PreTokenizer::add_metaspace(std::string replacement, PrependScheme scheme, bool split) {
  RBEE_CHECK(!replacement.empty(), "tokenizer: Metaspace needs a replacement character");
  Step s;
  s.kind = Step::Kind::Metaspace;
  s.replacement = std::move(replacement);
  s.scheme = scheme;
  s.split = split;
  if (split) s.regex = std::make_shared<const text::Regex>(quote_literal(s.replacement));
  steps_.push_back(std::move(s));
}

bool PreTokenizer::maps_bytes() const {
  for (const Step& s : steps_) {
    if (s.kind == Step::Kind::ByteLevelMap) return true;
  }
  return false;
}

void PreTokenizer::apply(const Step& step, const std::string& piece, bool at_text_start,
                         std::vector<std::string>& out) {
  switch (step.kind) {
    case Step::Kind::ByteLevelPrefix:
      out.push_back(piece.starts_with(' ') ? piece : " " + piece);
      return;
    case Step::Kind::ByteLevelMap:
      out.push_back(text::byte_level::encode(piece));
      return;
    case Step::Kind::Metaspace: {
      std::string text;
      const bool prepend = step.scheme == PrependScheme::Always || (step.scheme == PrependScheme::First && at_text_start);
      if (prepend && !piece.starts_with(step.replacement)) text = step.replacement;
      for (char c : piece) {
        if (c == ' ') {
          text += step.replacement;
        } else {
          text += c;
        }
      }
      if (!step.split) {
        out.push_back(std::move(text));
        return;
      }
      // Every replacement character starts a new piece (MergedWithNext).
      Step split = step;
      split.kind = Step::Kind::Split;
      split.behavior = SplitBehavior::MergedWithNext;
      apply(split, text, at_text_start, out);
      return;
    }
    case Step::Kind::Split:
      break;
  }

  std::vector<Segment> segs;
  size_t last = 0;
  step.regex->for_each_match(piece, [&](size_t b, size_t e) {
    if (b > last) segs.push_back({last, b, step.invert});
    segs.push_back({b, e, !step.invert});
    last = e;
  });
  if (last < piece.size()) segs.push_back({last, piece.size(), step.invert});

  // Fold the segments into pieces as Hugging Face's NormalizedString::split does.
  std::vector<std::pair<size_t, size_t>> parts;
  switch (step.behavior) {
    case SplitBehavior::Isolated:
      for (const Segment& s : segs) parts.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::Removed:
      for (const Segment& s : segs) {
        if (!s.is_match) parts.emplace_back(s.begin, s.end);
      }
      break;
    case SplitBehavior::MergedWithPrevious: {
      bool prev_match = false;
      for (const Segment& s : segs) {
        if (s.is_match && !prev_match && !parts.empty()) {
          parts.back().second = s.end;
        } else {
          parts.emplace_back(s.begin, s.end);
        }
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool prev_match = false;  // walking right to left: whether the segment to the right was a match
      for (size_t i = segs.size(); i-- > 0;) {
        const Segment& s = segs[i];
        if (s.is_match && !prev_match && !parts.empty()) {
          parts.back().first = s.begin;
        } else {
          parts.emplace_back(s.begin, s.end);
        }
        prev_match = s.is_match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
    }
    case SplitBehavior::Contiguous: {
      bool prev_match = false;
      for (const Segment& s : segs) {
        if (s.is_match == prev_match && !parts.empty()) {
          parts.back().second = s.end;
        } else {
          parts.emplace_back(s.begin, s.end);
        }
        prev_match = s.is_match;
      }
      break;
    }
  }
  for (const auto& [b, e] : parts) {
    if (e > b) out.push_back(piece.substr(b, e - b));
  }
}

std::vector<std::string> PreTokenizer::run(std::string_view text, bool at_text_start) const {
  std::vector<std::string> pieces{std::string(text)};
  std::vector<std::string> next;
  for (const Step& step : steps_) {
    next.clear();
    for (size_t i = 0; i < pieces.size(); ++i) apply(step, pieces[i], at_text_start && i == 0, next);
    pieces.swap(next);
  }
  return pieces;
}

PreTokenizer PreTokenizer::for_gguf_pre(std::string_view pre) {
  PreTokenizer p;
  auto one = [&](std::string_view re) { p.add_split(std::string(re), SplitBehavior::Isolated); };
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3" || pre == "dbrx" ||
      pre == "smaug-bpe" || pre == "pixtral") {
    one(regexes::kLlama3);
  } else if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "stablelm2" || pre == "megrez") {
    one(regexes::kQwen2);
  } else if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "command-r" ||
             pre == "codeshell" || pre == "exaone" || pre == "minerva-7b") {
    one(R"(\p{N})");
    one(regexes::kGpt2);
  } else if (pre == "gpt-2" || pre == "gpt2" || pre == "phi-2" || pre == "mpt" || pre == "olmo" || pre == "jais" ||
             pre == "jina-es" || pre == "jina-de" || pre == "jina-v2-es" || pre == "jina-v2-de" ||
             pre == "gpt-neox") {
    one(regexes::kGpt2);
  } else if (pre == "tekken") {
    one(regexes::kTekken);
  } else if (pre == "gpt-4o") {
    one(regexes::kGpt4o);
  } else if (pre == "default") {
    // llama.cpp's fallback for byte-level vocabularies converted without a `pre` name.
    one(R"([\p{P}\$\+<=>\^~\|]+)");
    one(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))");
    one(R"(\p{N}+)");
    one(R"([0-9][0-9][0-9])");
  } else {
    RBEE_THROW(ErrorCode::Unsupported, "tokenizer: unsupported pre-tokenizer '{}' (tokenizer.ggml.pre)", pre);
  }
  p.add_byte_level(false, false);
  return p;
}

}  // namespace rbee::llm
