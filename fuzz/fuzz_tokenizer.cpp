// libFuzzer target for the tokenizers. The first input byte picks what the rest is:
//   0: text  -> encode with SmolLM2 (byte-level BPE) and Llama 2 (SentencePiece), both parse_special modes;
//               valid UTF-8 must round trip through SmolLM2, invalid UTF-8 must be refused with Error;
//               the ids stream through StreamingDecoder, whose pieces must be valid UTF-8 and add up to decode()
//   1: ids   -> the rest as little-endian u16 ids: decode and stream them (out-of-range ids must throw Error)
//   2: tokenizer.json text -> load it, then encode and decode a fixed sample
//   3: GGUF bytes -> load the tokenizer from its metadata, then encode and decode a fixed sample
// Any rbee::Error is the expected outcome for bad input; anything else (crash, sanitizer report, another
// exception type, a broken invariant -> __builtin_trap) is a bug.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "llm/tokenizer/tokenizer_impl.h"
#include "rbee/text/utf8.h"
#include "rbee/core/error.h"
#include "rbee/formats/gguf.h"
#include "rbee/llm/tokenizer.h"

namespace {

using rbee::llm::StreamingDecoder;
using rbee::llm::TokenId;
using rbee::llm::Tokenizer;
namespace utf8 = rbee::text::utf8;

const Tokenizer& smollm2() {
  static const auto tok = Tokenizer::from_hf_json(std::string(RBEE_SOURCE_DIR) + "/tests/data/tokenizers/smollm2/tokenizer.json");
  return *tok;
}
const Tokenizer& llama2() {
  static const auto tok = Tokenizer::from_gguf(
      rbee::gguf::File::open(std::string(RBEE_SOURCE_DIR) + "/tests/data/tokenizers/ggml-vocab-llama-spm.gguf"));
  return *tok;
}

// Bytes whose GPT-2 character SmolLM2's vocabulary lacks: HF tokenizers (and we) drop them, so texts with them
// do not round trip.
bool smollm2_round_trips(std::string_view text) {
  static const std::vector<bool> dropped = [] {
    std::vector<bool> d(256);
    for (int b = 0; b < 128; ++b) {
      const std::string one(1, static_cast<char>(b));
      d[b] = smollm2().decode(smollm2().encode(one, false, false)) != one;
    }
    return d;
  }();
  for (char c : text) {
    if (static_cast<uint8_t>(c) < 128 && dropped[static_cast<uint8_t>(c)]) return false;
  }
  return true;
}

void check(bool ok) {
  if (!ok) __builtin_trap();
}

// Streams `ids`; every piece is valid UTF-8 and together they are decode(ids) without the SentencePiece strip.
void stream(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  StreamingDecoder dec(tok, /*skip_special=*/false);
  std::string all, raw;
  for (TokenId id : ids) {
    const std::string piece = dec.push(id);
    check(text::utf8::find_invalid(piece) == std::string_view::npos);
    all += piece;
    raw += tok.token_bytes(id);
  }
  all += dec.flush();
  check(all == text::utf8::sanitize(raw));
}

void exercise(const Tokenizer& tok) {
  const std::string sample = "Hello <|im_start|> w\xC3\xB6rld \xF0\x9F\xA6\x99 123";
  const auto ids = tok.encode(sample, true, true);
  const std::string text = tok.decode(ids, false);
  check(text::utf8::find_invalid(text) == std::string_view::npos);
  stream(tok, ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 4;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool valid = text::utf8::find_invalid(rest) == std::string_view::npos;
  try {
    switch (mode) {
      case 0:
        for (const Tokenizer* tok : {&smollm2(), &llama2()}) {
          for (bool parse_special : {true, false}) {
            std::vector<TokenId> ids;
            try {
              ids = tok->encode(rest, true, parse_special);
            } catch (const rbee::Error&) {
              check(!valid);  // only invalid UTF-8 may be refused
              continue;
            }
            check(valid);
            if (tok == &smollm2() && smollm2_round_trips(rest)) check(tok->decode(ids) == rest);
            stream(*tok, ids);
          }
        }
        break;
      case 1: {
        std::vector<TokenId> ids;
        for (size_t i = 0; i + 1 < rest.size(); i += 2) {
          ids.push_back(static_cast<TokenId>(static_cast<uint8_t>(rest[i]) | (static_cast<uint8_t>(rest[i + 1]) << 8)));
        }
        for (const Tokenizer* tok : {&smollm2(), &llama2()}) {
          bool in_range = true;
          for (TokenId id : ids) in_range = in_range && id < tok->vocab_size();
          try {
            check(text::utf8::find_invalid(tok->decode(ids)) == std::string_view::npos);
            stream(*tok, ids);
            check(in_range);
          } catch (const rbee::Error&) {
            check(!in_range);
          }
        }
        break;
      }
      case 2:
        exercise(*rbee::llm::tokenizer_from_hf_json_text(rest, nullptr, nullptr, "fuzz"));
        break;
      case 3: {
        const auto file = rbee::gguf::File::parse({data + 1, size - 1}, "fuzz");
        exercise(*Tokenizer::from_gguf(file));
        break;
      }
    }
  } catch (const rbee::Error&) {
  }
  return 0;
}
