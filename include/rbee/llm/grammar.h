// Grammars for constrained sampling: GBNF text (llama.cpp's grammar format) or a JSON Schema (compiled to GBNF),
// compiled into byte-level rules, and a matcher that turns the rules into a token mask at every step.
//
// How the mask is made: the matcher's state is a set of parse stacks (each stack is hash-consed, so a set of
// stacks is a small sorted vector of ids), and states are built lazily into a DFA over bytes: one transition
// table of 256 entries per state, filled on first use. A step's mask is the set of tokens whose bytes the DFA
// walks without dying; it is found by one walk over a trie of the vocabulary's token bytes, pruned at the first
// dead byte, and kept per DFA state (states repeat: inside a string, between properties, ...). End-of-sequence
// tokens are allowed where the grammar's root may end; special tokens and empty tokens never are.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "rbee/llm/token_constraint.h"
#include "rbee/llm/tokenizer.h"

namespace rbee::llm::grammar {

struct Rules;  // the compiled grammar (src/llm/grammar/rules.h)

// A parsed grammar: immutable, shared by every matcher made from it.
class Grammar {
 public:
  // GBNF: `name ::= alternatives`, literals "..." with \n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH, character classes
  // [a-z] [^...] (over code points), `.` (any character), groups ( ), repetitions * + ? {m} {m,} {m,n}, # comments.
  // `root` is the start rule. Throws InvalidArgument "grammar: line L, column C: ..." (undefined rules, left
  // recursion and syntax errors included).
  static std::shared_ptr<const Grammar> parse(std::string_view gbnf);
  const Rules& rules() const { return *rules_; }
  const std::string& source() const { return source_; }
  ~Grammar();

  Grammar(std::unique_ptr<Rules> rules, std::string source);

 private:
  std::unique_ptr<Rules> rules_;
  std::string source_;
};

// JSON Schema -> GBNF for the JSON texts the schema accepts (the output always validates): type (and lists of
// types), properties (in schema order; required ones always, others optional), additionalProperties (false,
// absent: none; true or a schema: more "key": value pairs after the listed ones), enum, const, anyOf, oneOf,
// allOf of one schema, $ref to #/$defs or #/definitions (recursion allowed), items, prefixItems, minItems,
// maxItems, minLength, maxLength, pattern (a regular expression: literals, classes, ., groups, |, quantifiers;
// matched as a whole), format date / time / date-time / uuid, minimum / maximum / exclusiveMinimum /
// exclusiveMaximum (integer bounds; a fractional bound is rounded inwards). Keywords that would constrain the
// value in ways the grammar does not follow (multipleOf, uniqueItems, not, if/then/else, patternProperties,
// minProperties, ...) are refused: InvalidArgument "json_schema: at <JSON pointer>: ...". An empty schema ({}
// or true) is any JSON value. Whitespace: none inside the value except one optional space or newline-plus-indent
// after separators; the text ends at the value's last character.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);
// Any JSON object (response_format json_object).
std::string json_object_gbnf();

// The vocabulary as the matcher sees it: each token's bytes in a trie, the end tokens. Build once per model.
class Vocabulary {
 public:
  explicit Vocabulary(const Tokenizer& tokenizer);
  ~Vocabulary();
  int32_t size() const { return size_; }
  struct Trie;
  const Trie& trie() const { return *trie_; }
  const std::vector<TokenId>& end_tokens() const { return end_; }
  const std::string& bytes(TokenId id) const { return bytes_[(size_t)id]; }

 private:
  int32_t size_;
  std::vector<std::string> bytes_;  // empty for special and empty tokens: never allowed by a grammar
  std::vector<TokenId> end_;
  std::unique_ptr<Trie> trie_;
};

// The lazily built automaton of one grammar over one vocabulary. Thread-safe (one mutex): matchers of several
// requests may share it, so that masks built for one request serve the next.
class Automaton;

// The initial state of a matcher, to hand to JobRequest::constraint (each sequence clones it). Throws
// InvalidArgument when the grammar's root cannot start with any token of the vocabulary.
std::shared_ptr<const TokenConstraint> make_constraint(std::shared_ptr<const Grammar> grammar,
                                                       std::shared_ptr<const Vocabulary> vocabulary);

// Automata kept across requests, by grammar source: a schema's masks are built once for all the requests that use
// it. Beyond `capacity` automata, or `max_bytes` held by them all (counted at each get(), as automata grow while
// they are used), the least recently used ones are dropped; requests still running on a dropped automaton keep it
// alive until they end. Thread-safe.
class ConstraintCache {
 public:
  explicit ConstraintCache(std::shared_ptr<const Vocabulary> vocabulary, size_t capacity = 32,
                           size_t max_bytes = size_t(512) << 20);
  ~ConstraintCache();
  // The initial state of a matcher for `grammar` (InvalidArgument as make_constraint).
  std::shared_ptr<const TokenConstraint> get(const std::shared_ptr<const Grammar>& grammar);
  size_t size() const;  // automata kept now

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// For tests and benchmarks: does the grammar accept `text` as a whole?
bool accepts(const Grammar& grammar, std::string_view text);

}  // namespace rbee::llm::grammar
