// Parser for the Jinja subset: turns template source into a Program (see ast.h).
#pragma once

#include <memory>
#include <string_view>

#include "llm/chat/ast.h"

namespace rbee::llm::jinja {

// Normalizes and parses `raw`. Throws Error(InvalidArgument) "chat template syntax error at line L, column C: ...".
std::unique_ptr<Program> parse_program(std::string_view raw);

}  // namespace rbee::llm::jinja
