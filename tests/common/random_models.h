// Random-weight test models (llm::write_random_model), written once per test process into the temporary
// directory and removed when the process ends.
#pragma once

#include <cstdint>
#include <string>

#include "rbee/core/dtype.h"

namespace rbee::test {

// The path of a GGUF of `preset`'s shape ("tiny-llama", "tiny-gemma3", ...) with random weights of `type` drawn
// from `seed`: written at the first call with these arguments, the same file for later calls. The name holds the
// process id, so test programs running at once do not share files.
const std::string& random_model_file(const std::string& preset, DType type, uint64_t seed);

}  // namespace rbee::test
