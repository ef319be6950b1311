// Helpers for the end-to-end golden tests: reading the golden files that tools/goldens/ wrote, and running a
// Model over a token sequence through the public ForwardBatch API.
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/source_dir.h"
#include "rbee/core/error.h"
#include "rbee/llm/model.h"

namespace rbee::test {

inline std::string golden_data_dir() { return source_dir() + "/tests/data"; }

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  RBEE_CHECK_CODE(in.good(), ErrorCode::NotFound, "golden file {} is missing", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// A little-endian float32 file (the goldens are written with numpy '<f4'; this machine is little-endian).
inline std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  RBEE_CHECK_CODE(in.good(), ErrorCode::NotFound, "golden file {} is missing", path);
  const std::streamsize bytes = in.tellg();
  RBEE_CHECK_CODE(bytes % 4 == 0, ErrorCode::Io, "{}: {} bytes is not a whole number of floats", path, bytes);
  std::vector<float> out((size_t)bytes / 4);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(out.data()), bytes);
  return out;
}

// One sequence through the model with every position's logits: the first `prefill` tokens as one batch, then
// the rest one token per forward call (decode through the paged cache). Returns [ids.size(), vocab] row-major.
inline std::vector<float> run_sequence(llm::Model& model, llm::KvCache& cache, const std::vector<llm::TokenId>& ids,
                                       size_t prefill) {
  llm::SequenceKv seq;
  RBEE_CHECK(seq.reserve(cache, (int)ids.size()), "the test's KV cache is too small for {} tokens", ids.size());
  std::vector<float> out;
  size_t done = 0;
  while (done < ids.size()) {
    const size_t len = done == 0 ? std::min(prefill, ids.size()) : 1;
    llm::ForwardBatch batch;
    batch.tokens.assign(ids.begin() + (long)done, ids.begin() + (long)(done + len));
    batch.seqs.push_back({&seq, (int)len, (int)(done + len), /*all_logits=*/true});
    const std::vector<float> rows = model.forward(batch, cache).to_vector<float>();
    out.insert(out.end(), rows.begin(), rows.end());
    done += len;
    seq.length = (int)done;
  }
  seq.release(cache);
  return out;
}

}  // namespace rbee::test
