#include "rbee/llm/scheduler.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "rbee/core/step_times.h"
#include "rbee/ops.h"

namespace rbee::llm {

namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
int ceil_div(int a, int b) { return (a + b - 1) / b; }

bool is_out_of_memory(const std::exception& e) {
  const auto* err = dynamic_cast<const Error*>(&e);
  return dynamic_cast<const std::bad_alloc*>(&e) || (err && err->code() == ErrorCode::OutOfMemory);
}

// "out_of_memory" for a full device (or RBEE_FAULT_ALLOC_*), else "forward".
const char* forward_error_code(const std::exception& e) { return is_out_of_memory(e) ? "out_of_memory" : "forward"; }

// Sampling allocates too (the logits read back through a host staging buffer, device sampling's scratch on a GPU): a
// full device there is "out_of_memory" like in the forward pass (503 with Retry-After for a request not yet
// streaming), else "sampling".
const char* sampling_error_code(const std::exception& e) { return is_out_of_memory(e) ? "out_of_memory" : "sampling"; }

// Choice i of a group samples with seed + i (a request without a seed: the clock, different per choice).
SamplingParams choice_params(SamplingParams p, int choice) {
  if (choice == 0) return p;
  if (!p.has_seed) {
    p.has_seed = true;
    p.seed = (uint64_t)Clock::now().time_since_epoch().count();
  }
  p.seed += (uint64_t)choice;
  return p;
}
}  // namespace

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::Mean: return "mean";
    case Pooling::Last: return "last";
    case Pooling::Cls: return "cls";
  }
  return "last";
}

// One submitted request: its sequences (one per choice) and what they share.
struct Scheduler::Group {
  JobRequest request;
  std::vector<std::shared_ptr<JobSink>> sinks;
  std::shared_ptr<JobHandle> handle;
  Clock::time_point submitted;
  std::vector<Active*> members;            // admitted sequences, the one that evaluates the prompt first
  std::vector<TokenLogprob> prompt_logprobs;
  std::vector<double> pooled;              // embedding jobs: the pooling accumulator [hidden]
};

// One running sequence: its cache blocks, sampler, stop matcher, text decoder and constraint.
struct Scheduler::Active {
  Active(std::shared_ptr<Group> g, int choice_, const Tokenizer& tok)
      : group(std::move(g)),
        request(group->request),
        sink(group->sinks[(size_t)choice_]),
        choice(choice_),
        sampler(choice_params(request.sampling, choice_)),
        stops(request.stop),
        decoder(tok, request.skip_special),
        constraint(request.constraint ? request.constraint->clone() : nullptr) {}
  ~Active() { std::erase(group->members, this); }

  std::shared_ptr<Group> group;
  const JobRequest& request;
  std::shared_ptr<JobSink> sink;
  int choice;
  Clock::time_point admitted, first_token;
  SequenceKv kv;
  Sampler sampler;
  StopMatcher stops;
  StreamingDecoder decoder;
  std::unique_ptr<TokenConstraint> constraint;
  int prefilled = 0;         // prompt tokens whose keys and values are in the cache
  bool decoding = false;     // prompt done; `next` is the token to feed
  bool awaiting_fork = false;  // a choice > 0 waiting for choice 0's prompt
  bool uses_prefix_cache = false;  // takes cached blocks for its prompt (generation leaders without prompt rows)
  // Speculative decoding: this step's drafts, the tokens so far (prompt + generated, for drafting), and the
  // sequence's state in the draft model's cache (draft_ok: reserved there).
  std::vector<TokenId> drafts;
  std::vector<TokenId> context;
  DraftModel::Sequence draft;
  bool draft_ok = false;
  TokenId next = -1;
  std::vector<TokenId> generated;
  JobSummary summary;
  bool done = false;
};

Scheduler::Scheduler(Model& model, KvCache& cache, SchedulerOptions options)
    : model_(model), cache_(cache), options_(options), eos_(model.tokenizer().eos_ids()) {
  RBEE_CHECK(options_.parallel >= 1, "scheduler: parallel must be >= 1, got {}", options_.parallel);
  RBEE_CHECK(options_.max_queue >= 0, "scheduler: max_queue must be >= 0, got {}", options_.max_queue);
  RBEE_CHECK(options_.prefill_budget >= 1, "scheduler: prefill_budget must be >= 1, got {}", options_.prefill_budget);
  if (!options_.prefix_cache) cache_.clear_prefix_index();
  if (options_.speculative.method != SpeculativeOptions::Method::Off) validate(options_.speculative);
  RBEE_CHECK(options_.speculative.method != SpeculativeOptions::Method::DraftModel || options_.draft != nullptr,
             "scheduler: draft-model speculation needs a draft model");
  update_cache_stats();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  if (thread_.joinable()) drain(std::chrono::milliseconds(0));
}

int Scheduler::max_positions() const {
  const int cache_positions = cache_.num_blocks() * cache_.block_size();
  return options_.max_job_positions > 0 ? std::min(options_.max_job_positions, cache_positions) : cache_positions;
}

int Scheduler::blocks_needed(const JobRequest& r) const {
  const int bs = cache_.block_size();
  const int prompt = (int)r.prompt.size();
  const int total = prompt + (r.embed ? 0 : r.max_tokens);
  const int fork_own = total - (prompt / bs) * bs;  // a fork shares the prompt's full blocks
  return ceil_div(total, bs) + (r.n - 1) * ceil_div(fork_own, bs);
}

Scheduler::Submit Scheduler::submit(JobRequest request, std::vector<std::shared_ptr<JobSink>> sinks,
                                    std::shared_ptr<JobHandle>* handle) {
  const int vocab = model_.config().vocab_size;
  RBEE_CHECK(!request.prompt.empty(), "prompt: no tokens to start from");
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    RBEE_CHECK(request.prompt[i] >= 0 && request.prompt[i] < vocab,
               "prompt: token id {} at position {} is outside the vocabulary [0, {})", request.prompt[i], i, vocab);
  }
  RBEE_CHECK(request.n >= 1 && request.n <= options_.parallel,
             "n: must be in [1, {}] (the worker's parallel slots), got {}", options_.parallel, request.n);
  RBEE_CHECK(sinks.size() == (size_t)request.n, "scheduler: {} choices need {} sinks, got {}", request.n, request.n,
             sinks.size());
  for (const auto& s : sinks) RBEE_CHECK(s != nullptr, "scheduler: a job needs a sink");
  if (request.embed) {
    RBEE_CHECK(request.n == 1, "n: an embedding job has one result");
    RBEE_CHECK((int64_t)request.prompt.size() <= max_positions(), "prompt: {} tokens exceed the context of {} positions",
               request.prompt.size(), max_positions());
  } else {
    RBEE_CHECK(request.max_tokens >= 0, "max_tokens: must be >= 0, got {}", request.max_tokens);
    RBEE_CHECK((int64_t)request.prompt.size() + request.max_tokens <= max_positions(),
               "max_tokens: the prompt ({} tokens) + max_tokens ({}) exceeds the context of {} positions",
               request.prompt.size(), request.max_tokens, max_positions());
    RBEE_CHECK(request.min_tokens >= 0 && request.min_tokens <= request.max_tokens,
               "min_tokens: must be in [0, max_tokens = {}], got {}", request.max_tokens, request.min_tokens);
    RBEE_CHECK(request.top_logprobs >= -1 && request.top_logprobs <= 20, "top_logprobs: must be in [0, 20], got {}",
               request.top_logprobs);
    for (TokenId id : request.stop_token_ids) {
      RBEE_CHECK(id >= 0 && id < vocab, "stop_token_ids: token id {} is outside the vocabulary [0, {})", id, vocab);
    }
    validate(request.sampling, vocab);
  }
  const int needed = blocks_needed(request);
  RBEE_CHECK(needed <= cache_.num_blocks(),
             "n: {} choices of a {}-token prompt + max_tokens {} need {} KV cache blocks; the cache has {}", request.n,
             request.prompt.size(), request.max_tokens, needed, cache_.num_blocks());
  auto h = std::make_shared<JobHandle>();
  auto group = std::make_shared<Group>();
  group->request = std::move(request);
  group->sinks = std::move(sinks);
  group->handle = h;
  {
    std::lock_guard lock(mutex_);
    if (!accepting_) return Submit::Stopped;
    // Cancelled jobs still in the queue (dropped at the next step) do not count against the bound.
    const auto waiting =
        std::count_if(queue_.begin(), queue_.end(), [](const Queued& q) { return !q.group->handle->cancelled(); });
    if ((int)waiting >= options_.max_queue) return Submit::QueueFull;
    group->submitted = Clock::now();
    queue_.push_back({std::move(group)});
    ++submitted_;
  }
  cv_.notify_all();
  if (handle) *handle = std::move(h);
  return Submit::Accepted;
}

void Scheduler::drain(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mutex_);
    accepting_ = false;
    stop_thread_ = true;
    drain_deadline_ = std::min(drain_deadline_, Clock::now() + grace);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  // One lock for the queue and the figures admission publishes with it (admit()): a heartbeat never counts a job
  // as both queued and running, or as neither while it moves. Figures a step changes later (a job finishing,
  // cumulative counters) are read as they stand.
  std::lock_guard lock(mutex_);
  // Cancelled jobs still in the queue (dropped at the next step) are not waiting: routers read this figure.
  s.queued = (int)std::count_if(queue_.begin(), queue_.end(),
                                [](const Queued& q) { return !q.group->handle->cancelled(); });
  s.running = running_count_;
  s.free_blocks = free_blocks_;
  s.total_blocks = cache_.num_blocks();
  s.block_size = cache_.block_size();
  s.cached_blocks = cached_blocks_;
  s.evicted_blocks = evicted_blocks_;
  s.prefix_queried_tokens = prefix_queried_;
  s.prefix_hit_tokens = prefix_hits_;
  s.spec_drafted_tokens = spec_drafted_;
  s.spec_accepted_tokens = spec_accepted_;
  s.steps = steps_;
  s.max_batch_rows = max_batch_rows_;
  return s;
}

void Scheduler::update_cache_stats() {
  free_blocks_ = cache_.free_blocks();
  cached_blocks_ = cache_.cached_blocks();
  evicted_blocks_ = cache_.evictions();
}

void Scheduler::loop() {
  uint64_t seen = 0;
  while (true) {
    {
      std::lock_guard lock(mutex_);
      if (stop_thread_ && queue_.empty() && running_.empty()) break;
      seen = submitted_;
    }
    bool worked = false;
    try {
      worked = step();
    } catch (const std::exception& e) {
      // step() handles forward and sampling faults per job; anything else ends every running job.
      log::error("event=scheduler_error error=\"{}\"", e.what());
      for (auto& a : running_) finish(*a, StopReason::Error, "internal", e.what());
      running_.clear();
      running_count_ = 0;
      update_cache_stats();
    }
    if (!worked) {
      std::unique_lock lock(mutex_);
      cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return submitted_ != seen || stop_thread_; });
    }
  }
}

void Scheduler::admit() {
  std::vector<Queued> dropped;
  std::vector<Active*> started;
  {
    std::lock_guard lock(mutex_);
    // While draining, queued jobs were accepted (the client holds a 200 and maybe an open stream): they still run
    // while the grace period lasts, and are cancelled once it is over.
    const bool past_grace = !accepting_ && Clock::now() >= drain_deadline_;
    while (!queue_.empty()) {
      Queued& q = queue_.front();
      if (q.group->handle->cancelled() || past_grace) {
        dropped.push_back(std::move(q));
        queue_.pop_front();
        continue;
      }
      const JobRequest& r = q.group->request;
      if ((int)running_.size() + r.n > options_.parallel) break;
      const int prompt = (int)r.prompt.size();
      // The leader's cached prefix: held now, so that admission counts only the blocks still to allocate.
      const bool cacheable = options_.prefix_cache && !r.embed && !r.prompt_logprobs;
      SequenceKv leader_kv;
      const int cached = cacheable ? leader_kv.adopt_cached_prefix(cache_, r.prompt, prompt - 1) : 0;
      // First in, first served: the head waits for blocks rather than being overtaken by smaller jobs.
      if (blocks_needed(r) - (int)leader_kv.blocks().size() > cache_.free_blocks()) {
        leader_kv.release(cache_);
        break;
      }
      std::shared_ptr<Group> g = std::move(q.group);
      queue_.pop_front();
      const int total = prompt + (r.embed ? 0 : r.max_tokens);
      const auto now = Clock::now();
      if (cacheable) {
        prefix_queried_ += (uint64_t)prompt;
        prefix_hits_ += (uint64_t)cached;
      }
      for (int c = 0; c < r.n; ++c) {
        auto a = std::make_unique<Active>(g, c, model_.tokenizer());
        const int own = c == 0 ? total : total - (prompt / cache_.block_size()) * cache_.block_size();
        if (c == 0) {
          a->kv = std::move(leader_kv);
          a->prefilled = cached;
          a->summary.cached_prompt_tokens = cached;
          a->uses_prefix_cache = cacheable;
        }
        RBEE_ASSERT(a->kv.reserve(cache_, own), "admission: {} positions do not fit the free blocks", own);
        if (options_.speculative.method == SpeculativeOptions::Method::DraftModel && !r.embed && r.max_tokens > 1) {
          // A job the draft's cache cannot hold now decodes without drafts.
          a->draft_ok = options_.draft->reserve(a->draft, total);
        }
        a->awaiting_fork = c > 0;
        a->admitted = now;
        a->summary.prompt_tokens = prompt;
        a->summary.queue_seconds = seconds(g->submitted, now);
        g->members.push_back(a.get());
        started.push_back(a.get());
        running_.push_back(std::move(a));
      }
    }
    // Published under the queue's lock: stats() reads queued and running (and the blocks admission took) under it,
    // so a job admitted now shows in exactly one of the two figures.
    running_count_ = (int)running_.size();
    update_cache_stats();
  }
  for (auto& q : dropped) {
    JobSummary s;
    s.reason = StopReason::Cancelled;
    s.prompt_tokens = (int)q.group->request.prompt.size();
    s.queue_seconds = seconds(q.group->submitted, Clock::now());
    for (auto& sink : q.group->sinks) sink->on_finished(s);
  }
  for (Active* a : started) {
    log::debug("event=admitted job={} choice={} prompt_tokens={} max_tokens={}", a->request.id, a->choice,
               a->request.prompt.size(), a->request.max_tokens);
    a->sink->on_started();
  }
}

void Scheduler::finish(Active& a, StopReason reason, std::string error_code, std::string error_message) {
  if (a.done) return;
  a.done = true;
  const auto now = Clock::now();
  if (reason == StopReason::Eos || reason == StopReason::MaxTokens) {
    // What the decoder and the stop matcher still hold is released at a normal end, as generate() does.
    std::string tail;
    try {
      tail = a.stops.feed(a.decoder.flush());
      tail += a.stops.flush();
    } catch (const std::exception&) {
    }
    if (!tail.empty()) {
      a.summary.text += tail;
      a.sink->on_text(std::max(0, (int)a.generated.size() - 1), tail);
    }
  }
  a.summary.reason = reason;
  a.summary.tokens_out = (int)a.generated.size();
  if (a.generated.empty()) {
    a.summary.prompt_seconds = seconds(a.admitted, now);
  } else {
    a.summary.decode_seconds = seconds(a.first_token, now);
  }
  a.summary.error_code = error_code;
  a.summary.error_message = error_message;
  a.kv.release(cache_);
  if (a.draft_ok) options_.draft->release(a.draft);
  // stats() shows the job gone before its sink hears that it finished (callers check stats after on_finished).
  update_cache_stats();
  running_count_ = (int)std::count_if(running_.begin(), running_.end(), [](const auto& j) { return !j->done; });
  a.sink->on_finished(a.summary);
  // Choices still waiting for this sequence's prompt can never start: they end the same way.
  if (a.choice == 0) {
    for (Active* m : a.group->members) {
      if (m != &a && m->awaiting_fork) finish(*m, reason == StopReason::Cancelled ? reason : StopReason::Error,
                                              error_code.empty() ? "internal" : error_code,
                                              error_message.empty() ? "the shared prompt ended first" : error_message);
    }
  }
}

void Scheduler::fork_group(Active& leader) {
  Group& g = *leader.group;
  const int prompt = (int)leader.request.prompt.size();
  for (Active* m : g.members) {
    if (m == &leader || !m->awaiting_fork || m->done) continue;
    m->kv.fork_from(cache_, leader.kv, prompt);
    m->prefilled = prompt;
    m->awaiting_fork = false;
    m->decoding = true;
  }
}

void Scheduler::propose_drafts() {
  const SpeculativeOptions& so = options_.speculative;
  std::vector<DraftModel::Proposal> proposals;
  std::vector<Active*> owners;
  for (auto& a : running_) {
    a->drafts.clear();
    if (!a->decoding || a->done) continue;
    // Positions are reserved for prompt + max_tokens: k drafts write k positions past the next token, and up to
    // k + 1 tokens come out of the step.
    const int k = std::min(so.tokens, a->request.max_tokens - (int)a->generated.size() - 1);
    if (k <= 0) continue;
    if (a->context.empty()) a->context.assign(a->request.prompt.begin(), a->request.prompt.end());
    const size_t have = a->context.size() - a->request.prompt.size();
    a->context.insert(a->context.end(), a->generated.begin() + (long)have, a->generated.end());
    if (so.method == SpeculativeOptions::Method::PromptLookup) {
      a->drafts = prompt_lookup_draft(a->context, k, so.ngram_min, so.ngram_max);
    } else if (a->draft_ok) {
      proposals.push_back({&a->draft, a->context, k, {}});
      owners.push_back(a.get());
    }
  }
  if (proposals.empty()) return;
  options_.draft->propose(proposals);
  for (size_t i = 0; i < owners.size(); ++i) owners[i]->drafts = std::move(proposals[i].drafts);
}

std::vector<TokenId> Scheduler::banned_now(const Active& a) const {
  const JobRequest& r = a.request;
  std::vector<TokenId> banned;
  if ((int)a.generated.size() < r.min_tokens) {
    banned = eos_;
    banned.insert(banned.end(), r.stop_token_ids.begin(), r.stop_token_ids.end());
  }
  return banned;
}

bool Scheduler::samples_on_host(const Active& a) const {
  return options_.host_sampling || a.constraint != nullptr || a.request.top_logprobs >= 0;
}

void Scheduler::advance(Active& a, std::span<const float> row) {
  const JobRequest& r = a.request;
  const std::vector<TokenId> banned = banned_now(a);
  TokenLogprob lp;
  SampleStep step;
  step.banned = banned;
  step.top_logprobs = r.top_logprobs;
  step.logprobs = &lp;
  TokenId t = -1;
  try {
    if (a.constraint) step.allowed = &a.constraint->allowed();
    t = a.sampler.sample(row, r.prompt, a.generated, step);
  } catch (const std::exception& e) {
    finish(a, StopReason::Error, sampling_error_code(e), e.what());
    return;
  }
  take(a, t, r.top_logprobs >= 0 ? &lp : nullptr);
}

void Scheduler::sample_and_take(const Tensor& logits, std::span<const Draw> draws) {
  // The plain draws: one run of the sample op on the logits' device over the rows they read (gathered there
  // when they are not simply the logits' rows in order); only their ids come back to the host.
  SampleBatch batch;
  std::vector<int32_t> source;
  for (const Draw& d : draws) {
    if (samples_on_host(*d.job)) continue;
    batch.add(d.job->sampler, d.job->request.prompt, d.job->generated, banned_now(*d.job));
    source.push_back(d.row);
  }
  std::vector<TokenId> ids;
  std::string error;
  const char* error_code = "sampling";
  if (batch.size() > 0) {
    try {
      bool in_order = (int64_t)source.size() == logits.dim(0);
      for (size_t i = 0; in_order && i < source.size(); ++i) in_order = source[i] == (int32_t)i;
      const Tensor rows =
          in_order ? logits
                   : ops::index_select(logits,
                                       Tensor::from_vector(source, {(int64_t)source.size()}, logits.device()), 0);
      step_times::Phase phase("scheduler: sample op, wait for the ids");
      ids = batch.run(rows);
    } catch (const std::exception& e) {
      error = e.what();
      error_code = sampling_error_code(e);
      log::error("event=sampling_error rows={} error=\"{}\"", source.size(), e.what());
    }
  }
  // The other draws read their rows on the host: all the logits in one copy when that saves copies, else
  // row by row.
  const size_t host_draws = draws.size() - source.size(), vocab = (size_t)logits.dim(1);
  std::vector<float> host;
  std::string copy_error;
  ErrorCode copy_error_kind = ErrorCode::Internal;
  try {
    if (host_draws > 1 && host_draws * 2 >= (size_t)logits.dim(0)) host = logits.to_vector<float>();
  } catch (const std::exception& e) {
    copy_error = e.what();
    if (is_out_of_memory(e)) copy_error_kind = ErrorCode::OutOfMemory;
  }
  step_times::Phase phase("scheduler: take the tokens (stops, text, sinks)");
  size_t next = 0;
  for (const Draw& d : draws) {
    Active& a = *d.job;
    if (samples_on_host(a)) {
      if (a.done) continue;
      if (!host.empty()) {
        advance(a, std::span<const float>(host.data() + (size_t)d.row * vocab, vocab));
        continue;
      }
      std::vector<float> row;
      try {
        if (!copy_error.empty()) throw Error(copy_error_kind, copy_error);
        row = logits.narrow(0, d.row, 1).to_vector<float>();
      } catch (const std::exception& e) {
        log::error("event=sampling_error rows=1 error=\"{}\"", e.what());
        finish(a, StopReason::Error, sampling_error_code(e), e.what());
        continue;
      }
      advance(a, row);
      continue;
    }
    const size_t i = next++;
    if (a.done) continue;
    if (!error.empty()) {
      finish(a, StopReason::Error, error_code, error);
    } else if (ids[i] < 0) {
      finish(a, StopReason::Error, "sampling", "sample: every token is banned (logit_bias, the grammar or min_tokens)");
    } else {
      take(a, ids[i], nullptr);
    }
  }
}

void Scheduler::take(Active& a, TokenId t, const TokenLogprob* lp) {
  const JobRequest& r = a.request;
  if (a.generated.empty()) {
    a.first_token = Clock::now();
    a.summary.prompt_seconds = seconds(a.admitted, a.first_token);
  }
  a.generated.push_back(t);
  const int index = (int)a.generated.size() - 1;
  const bool ends = (!r.ignore_eos && std::find(eos_.begin(), eos_.end(), t) != eos_.end()) ||
                    std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), t) != r.stop_token_ids.end();
  if (ends) {
    finish(a, StopReason::Eos);
    return;
  }
  if (a.constraint) {
    try {
      a.constraint->accept(t);
    } catch (const std::exception& e) {
      finish(a, StopReason::Error, sampling_error_code(e), e.what());
      return;
    }
  }
  if (lp) a.sink->on_logprobs(index, *lp);
  const std::string safe = a.stops.feed(a.decoder.push(t));
  if (!safe.empty()) {
    a.summary.text += safe;
    a.sink->on_text(index, safe);
  }
  if (a.stops.stopped()) {
    finish(a, StopReason::StopSequence);
  } else if (a.constraint && a.constraint->finished()) {
    finish(a, StopReason::Eos);
  } else if ((int)a.generated.size() >= r.max_tokens) {
    finish(a, StopReason::MaxTokens);
  } else {
    a.next = t;
  }
}

bool Scheduler::run_embeddings(int& budget) {
  struct Row {
    Active* job;
    int new_tokens;
    int first_row;
    int rows;
  };
  std::vector<Row> rows;
  ForwardBatch batch;
  batch.hidden_states = true;
  int out_rows = 0;
  for (auto& a : running_) {
    if (!a->request.embed || a->done || budget <= 0) continue;
    const int n = std::min((int)a->request.prompt.size() - a->prefilled, budget);
    budget -= n;
    const bool all = a->request.pooling == Pooling::Mean || (a->request.pooling == Pooling::Cls && a->prefilled == 0);
    batch.tokens.insert(batch.tokens.end(), a->request.prompt.begin() + a->prefilled,
                        a->request.prompt.begin() + a->prefilled + n);
    batch.seqs.push_back({&a->kv, n, a->prefilled + n, all});
    rows.push_back({a.get(), n, out_rows, all ? n : 1});
    out_rows += all ? n : 1;
  }
  if (rows.empty()) return false;
  steps_++;
  std::vector<float> hidden;
  int64_t width = 0;
  try {
    const Tensor out = model_.forward(batch, cache_);
    width = out.dim(1);
    hidden = out.to_vector<float>();
  } catch (const std::exception& e) {
    log::error("event=forward_error kind=embedding rows={} error=\"{}\"", rows.size(), e.what());
    for (auto& r : rows) finish(*r.job, StopReason::Error, forward_error_code(e), e.what());
    return true;
  }
  for (const Row& r : rows) {
    Active& a = *r.job;
    Group& g = *a.group;
    const JobRequest& req = a.request;
    if (g.pooled.empty()) g.pooled.assign((size_t)width, 0.0);
    const float* base = hidden.data() + (size_t)r.first_row * (size_t)width;
    const int prompt = (int)req.prompt.size();
    const bool last_chunk = a.prefilled + r.new_tokens == prompt;
    if (req.pooling == Pooling::Mean) {
      for (int i = 0; i < r.rows; ++i)
        for (int64_t d = 0; d < width; ++d) g.pooled[(size_t)d] += base[(size_t)i * (size_t)width + (size_t)d];
    } else if ((req.pooling == Pooling::Cls && a.prefilled == 0) || (req.pooling == Pooling::Last && last_chunk)) {
      const float* row = req.pooling == Pooling::Cls ? base : base + (size_t)(r.rows - 1) * (size_t)width;
      for (int64_t d = 0; d < width; ++d) g.pooled[(size_t)d] = row[d];
    }
    a.prefilled += r.new_tokens;
    a.kv.length = a.prefilled;
    a.summary.prompt_tokens_evaluated = a.prefilled;
    if (!last_chunk) continue;
    std::vector<float> v(g.pooled.size());
    double norm = 0;
    const double scale = req.pooling == Pooling::Mean ? 1.0 / prompt : 1.0;
    for (size_t d = 0; d < v.size(); ++d) norm += (g.pooled[d] * scale) * (g.pooled[d] * scale);
    norm = std::sqrt(norm);
    const double div = req.normalize && norm > 0 ? norm : 1.0;
    for (size_t d = 0; d < v.size(); ++d) v[d] = (float)(g.pooled[d] * scale / div);
    a.sink->on_embedding(v);
    finish(a, StopReason::MaxTokens);
  }
  return true;
}

bool Scheduler::step() {
  // RBEE_STEP_TIMES=1: the host's phases of a step (rbee/core/step_times.h); `mark` ends one and starts the next.
  double mark_at = step_times::enabled() ? step_times::now() : 0.0;
  auto mark = [&](const char* phase) {
    if (!step_times::enabled()) return;
    const double t = step_times::now();
    step_times::add(phase, t - mark_at);
    mark_at = t;
  };
  const auto now = Clock::now();
  Clock::time_point drain_deadline;
  {
    std::lock_guard lock(mutex_);
    drain_deadline = drain_deadline_;
  }
  for (auto& a : running_) {
    if (a->group->handle->cancelled() || now >= drain_deadline) {
      finish(*a, StopReason::Cancelled);
    } else if (now >= a->request.deadline) {
      finish(*a, StopReason::Error, "timeout", "the request ran past its time limit");
    }
  }
  running_.remove_if([](const auto& a) { return a->done; });
  admit();  // publishes the running count and the cache figures itself
  if (running_.empty()) return false;

  // One batch: every decoding job's next token, then prompt chunks up to the prefill budget.
  struct Row {
    Active* job;
    int new_tokens;
    int first_row;  // its first row of logits
    int rows;       // rows of logits it gets (all its new tokens' when it asked for prompt log-probabilities)
  };
  std::vector<Row> rows;
  ForwardBatch batch;
  int out_rows = 0;
  if (options_.speculative.method != SpeculativeOptions::Method::Off) propose_drafts();
  for (auto& a : running_) {
    if (!a->decoding) continue;
    // The next token, then the drafts to verify: a row of logits for each (row i checks draft i).
    const int k = (int)a->drafts.size();
    batch.tokens.push_back(a->next);
    batch.tokens.insert(batch.tokens.end(), a->drafts.begin(), a->drafts.end());
    batch.seqs.push_back({&a->kv, 1 + k, a->kv.length + 1 + k, k > 0});
    rows.push_back({a.get(), 1 + k, out_rows, 1 + k});
    out_rows += 1 + k;
    a->summary.spec_drafted += k;
    spec_drafted_ += (uint64_t)k;
  }
  int budget = options_.prefill_budget;
  for (auto& a : running_) {
    if (a->decoding || a->awaiting_fork || a->request.embed || budget <= 0) continue;
    if (a->uses_prefix_cache) {
      // Blocks another job published since this one was admitted (e.g. the same system prompt, admitted in the
      // same step): taken instead of computed.
      const int gained = a->kv.adopt_cached_prefix(cache_, a->request.prompt, (int)a->request.prompt.size() - 1);
      a->prefilled = a->kv.length;
      a->summary.cached_prompt_tokens += gained;
      prefix_hits_ += (uint64_t)gained;
    }
    const int n = std::min((int)a->request.prompt.size() - a->prefilled, budget);
    budget -= n;
    const bool all = a->request.prompt_logprobs;
    batch.tokens.insert(batch.tokens.end(), a->request.prompt.begin() + a->prefilled,
                        a->request.prompt.begin() + a->prefilled + n);
    batch.seqs.push_back({&a->kv, n, a->prefilled + n, all});
    rows.push_back({a.get(), n, out_rows, all ? n : 1});
    out_rows += all ? n : 1;
  }
  bool worked = false;
  if (!rows.empty()) {
    worked = true;
    Tensor logits;  // [out_rows, vocab] on the model's device: only what a row needs comes to the host
    bool failed = false;
    mark("scheduler: admit, build the batch");
    try {
      logits = model_.forward(batch, cache_);
      mark("scheduler: model forward (host)");
    } catch (const std::exception& e) {
      // Out of memory (a full device, or RBEE_FAULT_ALLOC_*) ends this step's jobs with code "out_of_memory", which
      // the routes answer as 503 + Retry-After: the jobs admitted later still run, and the worker stays up.
      log::error("event=forward_error rows={} error=\"{}\"", rows.size(), e.what());
      for (auto& r : rows) finish(*r.job, StopReason::Error, forward_error_code(e), e.what());
      failed = true;
    }
    steps_++;
    if (!failed) {
      max_batch_rows_ = std::max<int>(max_batch_rows_, (int)batch.tokens.size());
      const size_t vocab = (size_t)logits.dim(1);
      std::vector<Draw> draws;  // the sequences that take a token this step, in order, and their logits rows
      for (const Row& r : rows) {
        Active& a = *r.job;
        if (a.done) continue;
        if (a.decoding) {
          // Row i follows the next token and drafts [0, i): it is valid while every draft before it was accepted,
          // i.e. equals the token the target itself picks (speculative.h). A job without drafts this step takes
          // its token with the other plain draws (sampled on the model's device); one with drafts accepts them one
          // by one, each row sampled on the host (its k + 1 rows come over in one copy), since whether row i + 1
          // counts depends on the token row i gave. Either way each emitted token takes one draw of the job's
          // generator, in order.
          const int k = r.rows - 1;
          if (k == 0) {
            a.kv.length += 1;  // the row's input token is now part of the sequence
            if (options_.prefix_cache) a.kv.publish_full_blocks(cache_, a.request.prompt, a.generated);
            if (a.draft_ok) DraftModel::rollback(a.draft, a.kv.length);
            draws.push_back({&a, r.first_row});
            continue;
          }
          std::vector<float> host;
          try {
            host = logits.narrow(0, r.first_row, r.rows).to_vector<float>();
          } catch (const std::exception& e) {
            log::error("event=sampling_error rows={} error=\"{}\"", r.rows, e.what());
            finish(a, StopReason::Error, sampling_error_code(e), e.what());
            continue;
          }
          for (int i = 0;; ++i) {
            a.kv.length += 1;  // the row's input token is now part of the sequence
            if (options_.prefix_cache) a.kv.publish_full_blocks(cache_, a.request.prompt, a.generated);
            advance(a, std::span<const float>(host.data() + (size_t)i * vocab, vocab));
            if (a.done || i == k || a.generated.back() != a.drafts[(size_t)i]) break;
            a.summary.spec_accepted += 1;
            spec_accepted_ += 1;
          }
          if (a.draft_ok && !a.done) DraftModel::rollback(a.draft, a.kv.length);
          continue;
        }
        const JobRequest& req = a.request;
        Group& g = *a.group;
        const int prompt = (int)req.prompt.size();
        if (req.prompt_logprobs) {
          // Row i predicts the prompt token after position prefilled + i (these rows come to the host; a copy
          // that fails after a good forward pass means a broken device: loop() then ends every running job).
          const std::vector<float> host = logits.narrow(0, r.first_row, r.rows).to_vector<float>();
          auto row_at = [&](int i) { return std::span<const float>(host.data() + (size_t)i * vocab, vocab); };
          if (g.prompt_logprobs.empty()) {
            TokenLogprob first;
            first.id = req.prompt[0];
            first.logprob = std::nanf("");
            g.prompt_logprobs.push_back(first);
          }
          for (int i = 0; i < r.rows; ++i) {
            const int next_pos = a.prefilled + i + 1;
            if (next_pos >= prompt) break;
            g.prompt_logprobs.push_back(
                token_logprob(row_at(i), req.prompt[(size_t)next_pos], std::max(0, req.top_logprobs)));
          }
        }
        a.prefilled += r.new_tokens;
        a.kv.length = a.prefilled;
        a.summary.prompt_tokens_evaluated = a.prefilled - a.summary.cached_prompt_tokens;
        if (options_.prefix_cache) a.kv.publish_full_blocks(cache_, req.prompt);
        if (a.prefilled < prompt) continue;  // more prompt to go: this row is not used
        a.decoding = true;
        const int last = r.first_row + r.rows - 1;
        fork_group(a);
        const std::vector<Active*> members = g.members;
        for (Active* m : members) {
          if (m->done || !m->decoding) continue;
          if (req.prompt_logprobs) m->sink->on_prompt_logprobs(g.prompt_logprobs);
          if (req.max_tokens == 0) finish(*m, StopReason::MaxTokens);  // the prompt only (its log-probabilities)
          else draws.push_back({m, last});
        }
      }
      mark("scheduler: rows to draws");
      sample_and_take(logits, draws);
      mark("scheduler: sample and take");
    }
  }
  if (run_embeddings(budget)) worked = true;
  running_.remove_if([](const auto& a) { return a->done; });
  running_count_ = (int)running_.size();
  update_cache_stats();
  if (worked) mark("scheduler: end of step");
  return worked;
}

}  // namespace rbee::llm
