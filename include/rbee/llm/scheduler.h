// Scheduler: continuous batching of many generation jobs over one Model and one paged KvCache.
//
// One thread owns the model and the cache. Each step it
//   1. drops cancelled jobs (queued or running) and frees their cache blocks,
//   2. admits queued jobs in arrival order while a slot is free (at most `parallel` running) and the cache has
//      the blocks for prompt + max_tokens (reserved up front, so a running job never runs out of cache),
//   3. builds one ForwardBatch: the next token of every decoding job, then prompt chunks of prefilling jobs in
//      admission order up to `prefill_budget` tokens (chunked prefill: a long prompt is spread over steps, so it
//      never stalls the other streams for more than one step's worth of prompt),
//   4. runs forward once, samples every job's row with the job's own settings, penalties and seed: the plain
//      rows in one run of the sample op on the model's device (the logits stay there, only the ids come back),
//      rows with a grammar or log-probabilities from their logits copied to the host; feeds the stop matcher
//      and the streaming decoder, and reports text to the job's sink,
//   5. finishes jobs (EOS, stop sequence, max_tokens, deadline) and frees their blocks at once.
// The steps are those of generate() (generate.h) for one sequence: greedy output does not depend on what else
// is in the batch, because the kernels compute each row on its own.
//
// A job may ask for more (JobRequest): n choices that share one evaluation of the prompt (the other sequences
// fork its KV blocks when it is done), log-probabilities of the generated and the prompt tokens, a token
// constraint (a grammar) that masks each step's logits, min_tokens / stop_token_ids, or no generation at all: an
// embedding job runs its prompt in a forward pass of its own that returns hidden states, and is pooled.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "rbee/llm/draft_model.h"
#include "rbee/llm/generate.h"
#include "rbee/llm/kv_cache.h"
#include "rbee/llm/model.h"
#include "rbee/llm/sampler.h"
#include "rbee/llm/speculative.h"
#include "rbee/llm/token_constraint.h"

namespace rbee::llm {

// How an embedding job pools the final hidden states of its prompt into one vector.
enum class Pooling { Mean, Last, Cls };
const char* pooling_name(Pooling p);  // "mean", "last", "cls"

struct JobRequest {
  std::string id;                 // for logs
  std::vector<TokenId> prompt;    // non-empty
  SamplingParams sampling;
  int max_tokens = 128;           // >= 1; 0 evaluates the prompt only (for its log-probabilities)
  std::vector<std::string> stop;  // stop sequences on the text
  bool ignore_eos = false;
  int min_tokens = 0;             // EOS and stop_token_ids cannot be drawn before this many tokens are out
  std::vector<TokenId> stop_token_ids;  // end the job like EOS (reason Eos; never emitted as text), ignore_eos or not
  bool skip_special = true;       // control tokens add no text (false: their text, e.g. tool-call markers)
  // Choices: n sequences continue the same prompt, which is evaluated once; its full KV blocks are shared and a
  // partly filled last block is copied. One sink per choice; choice i samples with seed + i.
  int n = 1;
  // >= 0: every generated token's log-probability and this many alternatives (<= 20) go to the sinks.
  int top_logprobs = -1;
  bool prompt_logprobs = false;   // also the prompt tokens' (OpenAI's echo), with max(top_logprobs, 0) alternatives
  // Constrained sampling: the initial state of a grammar matcher; each sequence advances its own copy.
  std::shared_ptr<const TokenConstraint> constraint;
  // An embedding job: the prompt's final hidden states (after the output norm) are pooled, optionally scaled to
  // unit length, and handed to on_embedding; nothing is sampled (max_tokens and sampling are ignored).
  bool embed = false;
  Pooling pooling = Pooling::Last;
  bool normalize = true;
  // The job ends with reason Error and error_code "timeout" when still running then.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct JobSummary {
  StopReason reason = StopReason::MaxTokens;
  int prompt_tokens = 0;
  int prompt_tokens_evaluated = 0;  // prompt tokens this sequence ran through the model (0 for forks of n > 1)
  int cached_prompt_tokens = 0;   // prompt tokens whose keys and values came from the prefix cache
  int spec_drafted = 0;           // speculative decoding: draft tokens verified
  int spec_accepted = 0;          // of those, accepted (each one a decode step saved)
  int tokens_out = 0;             // generated tokens (EOS and stop-sequence tokens included)
  std::string text;               // everything emitted
  double queue_seconds = 0;       // submit -> admission
  double prompt_seconds = 0;      // admission -> first token sampled
  double decode_seconds = 0;      // first token -> end
  std::string error_code;         // with reason Error: "timeout", "sampling", "forward"
  std::string error_message;
};

// Receives one job's events, on the scheduler thread: implementations must be quick and must not block.
class JobSink {
 public:
  virtual ~JobSink() = default;
  virtual void on_started() = 0;  // admitted: cache reserved, prompt processing begins
  // A piece of text released by generated token number `index` (0-based). Pieces are never half a UTF-8
  // character and never contain (part of) a stop sequence. Tokens that release no text produce no call.
  virtual void on_text(int index, const std::string& text) = 0;
  // With top_logprobs >= 0: generated token number `index`, before the on_text that releases its text (a token
  // whose text is held back comes before a later on_text; end tokens (EOS, stop_token_ids) are not reported).
  virtual void on_logprobs(int index, const TokenLogprob& logprob) {
    (void)index;
    (void)logprob;
  }
  // With prompt_logprobs, once, before the first generated token: one entry per prompt token; the first has
  // logprob NaN and no alternatives (nothing predicts it).
  virtual void on_prompt_logprobs(const std::vector<TokenLogprob>& logprobs) { (void)logprobs; }
  // An embedding job's vector [hidden_size], before on_finished.
  virtual void on_embedding(const std::vector<float>& embedding) { (void)embedding; }
  // Exactly once, last; by then the job's KV blocks are free and Scheduler::stats() no longer counts it.
  virtual void on_finished(const JobSummary& summary) = 0;
};

// A submitted job: cancel() is safe from any thread, at any time, more than once, even after the scheduler is
// gone. The scheduler acts on it before its next step (within one step, or 50 ms when idle).
class JobHandle {
 public:
  void cancel() { cancel_ = true; }
  bool cancelled() const { return cancel_.load(); }

 private:
  std::atomic<bool> cancel_{false};
};

struct SchedulerOptions {
  int parallel = 4;          // running sequences at most
  int max_queue = 64;        // waiting jobs at most (submit refuses beyond)
  int prefill_budget = 256;  // prompt tokens per step at most
  int max_job_positions = 0; // prompt + max_tokens of one job at most (0: the whole cache)
  // Automatic prefix caching (kv_cache.h): full blocks of finished positions are published under their chained
  // hash, and a generation job takes the cached blocks of its prompt's longest cached prefix instead of
  // computing them (at admission, and again before each prompt chunk, so jobs admitted together share what the
  // first one computes). The last prompt token is always computed (its logits pick the first token). Jobs that
  // want every prompt row (prompt log-probabilities, embeddings) compute their whole prompt.
  bool prefix_cache = true;
  // Speculative decoding (speculative.h): each decoding job's next token goes into the step together with up to
  // speculative.tokens drafts (prompt lookup, or `draft` for Method::DraftModel), all verified in the same forward
  // pass; the job emits the accepted drafts and one token of the target's own. Greedy output is unchanged; sampled
  // output keeps its distribution (each emitted token takes one draw of the job's generator, in order). A job's
  // step with drafts samples its rows on the host (acceptance is sequential); a step without drafts samples on the
  // model's device like any other.
  SpeculativeOptions speculative;
  DraftModel* draft = nullptr;  // must outlive the scheduler; required for Method::DraftModel
  // Every row sampled from its logits copied to the host (all rows in one copy, the CPU's sample op per row):
  // the path before the sample op ran on the device, kept for A/B measurements (`rbee bench --host-sampling`).
  // The tokens are the same either way.
  bool host_sampling = false;
};

struct SchedulerStats {
  int queued = 0;
  int running = 0;
  int free_blocks = 0;       // blocks a job can get: free plus parked cached ones (kv_cache.h)
  int total_blocks = 0;
  int block_size = 0;        // positions per block
  uint64_t steps = 0;
  int max_batch_rows = 0;    // largest batch run so far (tests check that batching happened)
  // Prefix caching (cumulative since start): prompt tokens of admitted jobs, and those taken from the cache.
  uint64_t prefix_queried_tokens = 0;
  uint64_t prefix_hit_tokens = 0;
  int cached_blocks = 0;     // published blocks, held or parked
  uint64_t evicted_blocks = 0;
  // Speculative decoding (cumulative since start).
  uint64_t spec_drafted_tokens = 0;
  uint64_t spec_accepted_tokens = 0;
};

class Scheduler {
 public:
  enum class Submit { Accepted, QueueFull, Stopped };

  // The model and cache must outlive the scheduler. Starts the scheduler thread.
  Scheduler(Model& model, KvCache& cache, SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Positions one job may use at most (prompt + max_tokens): the cache, or max_job_positions when smaller.
  int max_positions() const;

  // Checks the request (throws InvalidArgument naming the field: empty prompt, max_tokens < 1, prompt +
  // max_tokens beyond max_positions(), sampling ranges, token ids, n beyond the slots or the cache) and queues
  // it. QueueFull and Stopped leave `handle` empty and never call the sinks. `sinks` has one sink per choice
  // (request.n); the handle cancels them all.
  Submit submit(JobRequest request, std::vector<std::shared_ptr<JobSink>> sinks, std::shared_ptr<JobHandle>* handle);
  Submit submit(JobRequest request, std::shared_ptr<JobSink> sink, std::shared_ptr<JobHandle>* handle) {
    return submit(std::move(request), std::vector<std::shared_ptr<JobSink>>{std::move(sink)}, handle);
  }

  // Graceful stop: refuses new jobs, lets running and queued (already accepted) ones run until `grace` has passed,
  // then cancels the rest (queued ones never start); returns when every job has finished and the thread has exited.
  void drain(std::chrono::milliseconds grace);

  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Active;
  struct Group;
  struct Queued {
    std::shared_ptr<Group> group;
  };
  void loop();
  bool step();  // false when there was nothing to do
  void admit();
  void update_cache_stats();  // free, cached and evicted block counts for stats() (scheduler thread)
  // Blocks a group needs at admission: the first sequence's prompt + max_tokens, each fork's own part.
  int blocks_needed(const JobRequest& request) const;
  // A sequence that takes its next token this step, from row `row` of the step's logits.
  struct Draw {
    Active* job;
    int row;
  };
  // The tokens `a` may not draw now: EOS and the stop token ids while it has fewer than min_tokens.
  std::vector<TokenId> banned_now(const Active& a) const;
  // Whether a's tokens are sampled from host logits: a grammar's mask or log-probabilities need them (or
  // options_.host_sampling).
  bool samples_on_host(const Active& a) const;
  // Samples every draw from logits [rows, vocab] (on the model's device): the plain ones in one run of the
  // sample op there (only ids come back), the others from their row copied to the host; then take()s them.
  void sample_and_take(const Tensor& logits, std::span<const Draw> draws);
  // Samples the next token of `a` from host `row` (mask, bans, log-probabilities), then take()s it.
  void advance(Active& a, std::span<const float> row);
  // Reports token t of `a` (with its log-probabilities when asked for) and ends the sequence when it is done.
  void take(Active& a, TokenId t, const TokenLogprob* lp);
  // The first sequence of a group finished its prompt: the others fork its cache and start decoding.
  void fork_group(Active& leader);
  // Speculative decoding: fills each decoding job's drafts (empty when it has none this step).
  void propose_drafts();
  bool run_embeddings(int& budget);  // false when no embedding job had work
  void finish(Active& a, StopReason reason, std::string error_code = "", std::string error_message = "");

  Model& model_;
  KvCache& cache_;
  SchedulerOptions options_;
  std::vector<TokenId> eos_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Queued> queue_;      // guarded by mutex_
  bool accepting_ = true;         // guarded by mutex_
  bool stop_thread_ = false;      // guarded by mutex_
  uint64_t submitted_ = 0;        // guarded by mutex_; wakes the idle loop
  std::chrono::steady_clock::time_point drain_deadline_ = std::chrono::steady_clock::time_point::max();

  std::list<std::unique_ptr<Active>> running_;  // scheduler thread only
  std::atomic<int> running_count_{0};
  std::atomic<uint64_t> steps_{0};
  std::atomic<int> max_batch_rows_{0};
  std::atomic<int> free_blocks_{0};
  std::atomic<int> cached_blocks_{0};
  std::atomic<uint64_t> evicted_blocks_{0};
  std::atomic<uint64_t> prefix_queried_{0}, prefix_hits_{0};
  std::atomic<uint64_t> spec_drafted_{0}, spec_accepted_{0};
  std::thread thread_;
};

}  // namespace rbee::llm
