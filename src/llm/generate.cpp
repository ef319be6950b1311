#include "rbee/llm/generate.h"

#include <algorithm>
#include <chrono>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/core/step_times.h"
#include "rbee/ops.h"

namespace rbee::llm {

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::MaxTokens: return "MAX_TOKENS";
    case StopReason::Eos: return "EOS";
    case StopReason::StopSequence: return "STOP_SEQUENCE";
    case StopReason::Cancelled: return "CANCELLED";
    case StopReason::Error: return "ERROR";
  }
  return "ERROR";
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The next token from row 0 of logits [rows, vocab], sampled on the logits' device (only the id comes back).
TokenId next_token(Sampler& sampler, const Tensor& logits, std::span<const TokenId> prompt,
                   std::span<const TokenId> generated) {
  SampleBatch batch;
  batch.add(sampler, prompt, generated);
  const TokenId id = batch.run(logits.narrow(0, 0, 1))[0];
  RBEE_CHECK(id >= 0, "sample: every token is banned by logit_bias");
  return id;
}
}  // namespace

GenerateResult generate(Model& model, KvCache& cache, const GenerateRequest& req,
                        const std::function<bool(const std::string&)>& on_text) {
  const Tokenizer& tok = model.tokenizer();
  RBEE_CHECK(!req.prompt.empty(), "generate: the prompt is empty");
  RBEE_CHECK(req.max_tokens >= 0, "generate: max_tokens must be >= 0, got {}", req.max_tokens);
  RBEE_CHECK(req.prefill_chunk > 0, "generate: prefill_chunk must be positive");
  validate(req.sampling, model.config().vocab_size);
  const int total = (int)req.prompt.size() + req.max_tokens;
  const int capacity = cache.num_blocks() * cache.block_size();
  RBEE_CHECK(total <= capacity, "prompt ({} tokens) + max_tokens ({}) exceeds the context of {} positions",
             req.prompt.size(), req.max_tokens, capacity);

  GenerateResult result;
  result.prompt_tokens = (int)req.prompt.size();
  SequenceKv seq;
  struct Release {
    SequenceKv& s;
    KvCache& c;
    ~Release() { s.release(c); }
  } release{seq, cache};
  RBEE_CHECK_CODE(seq.reserve(cache, total), ErrorCode::OutOfMemory, "the KV cache has no room for {} positions",
                  total);

  const auto t0 = std::chrono::steady_clock::now();
  // Prompt processing in chunks; the last chunk's logits pick the first token.
  Tensor logits;
  for (size_t start = 0; start < req.prompt.size(); start += (size_t)req.prefill_chunk) {
    const size_t len = std::min(req.prompt.size() - start, (size_t)req.prefill_chunk);
    ForwardBatch batch;
    batch.tokens.assign(req.prompt.begin() + (long)start, req.prompt.begin() + (long)(start + len));
    batch.seqs.push_back({&seq, (int)len, (int)(start + len), false});
    logits = model.forward(batch, cache);
    seq.length = (int)(start + len);
  }
  Sampler sampler(req.sampling);
  TokenId next = -1;
  if (req.max_tokens > 0) {
    next = next_token(sampler, logits, req.prompt, result.tokens);  // waits for the prompt pass
  } else {
    model.device().synchronize();
  }
  result.prompt_seconds = seconds_since(t0);

  StopMatcher stops(req.stop);
  StreamingDecoder decoder(tok, true);
  const auto eos = tok.eos_ids();
  const auto t_decode = std::chrono::steady_clock::now();
  bool first = true;
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return true;
    if (first) {
      result.time_to_first_token = seconds_since(t0);
      first = false;
    }
    result.text += piece;
    return on_text(piece);
  };
  result.reason = StopReason::MaxTokens;
  for (int i = 0; i < req.max_tokens; ++i) {
    if (i > 0) next = next_token(sampler, logits, req.prompt, result.tokens);
    result.tokens.push_back(next);
    if (!req.ignore_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) {
      result.reason = StopReason::Eos;
      break;
    }
    const std::string safe = stops.feed(decoder.push(next));
    if (!emit(safe)) {
      result.reason = StopReason::Cancelled;
      break;
    }
    if (stops.stopped()) {
      result.reason = StopReason::StopSequence;
      break;
    }
    if (i + 1 == req.max_tokens) break;
    ForwardBatch batch;
    batch.tokens = {next};
    batch.seqs.push_back({&seq, 1, seq.length + 1, false});
    logits = model.forward(batch, cache);
    seq.length += 1;
  }
  if (result.reason != StopReason::StopSequence && result.reason != StopReason::Cancelled) {
    emit(stops.feed(decoder.flush()));
    emit(stops.flush());
  }
  result.decode_seconds = seconds_since(t_decode);
  return result;
}

std::vector<TokenId> greedy_decode_steps(Model& model, KvCache& cache, SequenceKv& seq, TokenId first, int steps) {
  RBEE_CHECK(steps >= 0, "greedy_decode_steps: steps must be >= 0, got {}", steps);
  const int vocab = model.config().vocab_size;
  RBEE_CHECK(first >= 0 && first < vocab, "greedy_decode_steps: first token {} is outside the vocabulary [0, {})",
             first, vocab);
  RBEE_CHECK((int64_t)seq.blocks().size() * cache.block_size() >= (int64_t)seq.length + steps,
             "greedy_decode_steps: the sequence has room for {} positions, needs {}",
             (int64_t)seq.blocks().size() * cache.block_size(), (int64_t)seq.length + steps);
  std::vector<TokenId> out;
  out.reserve((size_t)steps);
  ForwardBatch batch;
  batch.tokens = {first};
  batch.seqs.resize(1);
  for (int i = 0; i < steps; ++i) {
    batch.seqs[0] = {&seq, 1, seq.length + 1, false};
    Tensor logits;
    {
      step_times::Phase phase("greedy step: forward (host)");
      logits = model.forward(batch, cache);  // [1, vocab]
    }
    seq.length += 1;
    // Reading the id back waits for this step on the logits' device, which waited for every other device's part.
    step_times::Phase phase("greedy step: argmax, wait for the id");
    const int64_t id = ops::argmax(logits.narrow(0, 0, 1), 1).to_vector<int64_t>()[0];
    RBEE_CHECK(id >= 0 && id < vocab, "greedy_decode_steps: argmax {} outside the vocabulary", id);
    out.push_back((TokenId)id);
    batch.tokens[0] = (TokenId)id;
  }
  return out;
}

}  // namespace rbee::llm
