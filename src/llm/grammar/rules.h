// The compiled form of a grammar: byte-level rules. Every rule is a list of alternatives; every alternative is a
// sequence of elements ending with End. An element matches one byte out of a set (Term) or a whole rule (Ref).
// Alternatives live in one flat array, so a parse position is one index into it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace rbee::llm::grammar {

struct ByteSet {
  std::array<uint64_t, 4> bits{};
  void add(int b) { bits[(size_t)b >> 6] |= 1ull << (b & 63); }
  void add_range(int lo, int hi) {
    for (int b = lo; b <= hi; ++b) add(b);
  }
  bool has(int b) const { return (bits[(size_t)b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return !(bits[0] | bits[1] | bits[2] | bits[3]); }
};

struct Elem {
  enum Kind : uint8_t { Term, Ref, End };
  Kind kind = End;
  int32_t rule = -1;  // Ref
  ByteSet bytes;      // Term
};

struct Rules {
  std::vector<Elem> elems;
  std::vector<std::vector<int32_t>> alts;  // per rule: where each alternative starts in elems
  std::vector<std::string> names;          // per rule (helper rules get generated names)
  int32_t root = -1;
};

}  // namespace rbee::llm::grammar
