// TokenConstraint: what may come next in one sequence, as a mask over the vocabulary (constrained sampling). The
// grammar matcher (rbee/llm/grammar.h) is the implementation; the scheduler only sees this interface.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "rbee/llm/tokenizer.h"

namespace rbee::llm {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // The tokens allowed next: a bitset over the vocabulary (SampleStep::allowed). The end-of-sequence tokens are
  // in it only where the text may end. Never empty while !finished().
  virtual const std::vector<uint64_t>& allowed() = 0;
  // Advances past a token that the last allowed() permitted (throws InvalidArgument for another).
  virtual void accept(TokenId token) = 0;
  // True when nothing may follow the text but its end: the sequence stops without drawing an end token.
  virtual bool finished() const = 0;
  // A copy in the same state, advancing independently (the choices of n > 1).
  virtual std::unique_ptr<TokenConstraint> clone() const = 0;
};

}  // namespace rbee::llm
