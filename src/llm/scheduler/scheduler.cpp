#include "rbee/llm/scheduler.h"

#include <algorithm>
#include <span>

#include "rbee/core/error.h"
#include "rbee/core/log.h"

namespace rbee::llm {

namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
}  // namespace

// One running job: its cache blocks, sampler, stop matcher and text decoder.
struct Scheduler::Active {
  Active(Queued q, const Tokenizer& tok)
      : request(std::move(q.request)),
        sink(std::move(q.sink)),
        handle(std::move(q.handle)),
        submitted(q.submitted),
        sampler(request.sampling),
        stops(request.stop),
        decoder(tok, /*skip_special=*/true) {}

  JobRequest request;
  std::shared_ptr<JobSink> sink;
  std::shared_ptr<JobHandle> handle;
  Clock::time_point submitted, admitted, first_token;
  SequenceKv kv;
  Sampler sampler;
  StopMatcher stops;
  StreamingDecoder decoder;
  int prefilled = 0;         // prompt tokens whose keys and values are in the cache
  bool decoding = false;     // prompt done; `next` is the token to feed
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
  free_blocks_ = cache_.free_blocks();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  if (thread_.joinable()) drain(std::chrono::milliseconds(0));
}

int Scheduler::max_positions() const {
  const int cache_positions = cache_.num_blocks() * cache_.block_size();
  return options_.max_job_positions > 0 ? std::min(options_.max_job_positions, cache_positions) : cache_positions;
}

Scheduler::Submit Scheduler::submit(JobRequest request, std::shared_ptr<JobSink> sink,
                                    std::shared_ptr<JobHandle>* handle) {
  const int vocab = model_.config().vocab_size;
  RBEE_CHECK(!request.prompt.empty(), "prompt: no tokens to start from");
  RBEE_CHECK(request.max_tokens >= 1, "max_tokens: must be >= 1, got {}", request.max_tokens);
  RBEE_CHECK((int64_t)request.prompt.size() + request.max_tokens <= max_positions(),
             "max_tokens: the prompt ({} tokens) + max_tokens ({}) exceeds the context of {} positions",
             request.prompt.size(), request.max_tokens, max_positions());
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    RBEE_CHECK(request.prompt[i] >= 0 && request.prompt[i] < vocab,
               "prompt: token id {} at position {} is outside the vocabulary [0, {})", request.prompt[i], i, vocab);
  }
  validate(request.sampling, vocab);
  RBEE_CHECK(sink != nullptr, "scheduler: a job needs a sink");
  auto h = std::make_shared<JobHandle>();
  {
    std::lock_guard lock(mutex_);
    if (!accepting_) return Submit::Stopped;
    // Cancelled jobs still in the queue (dropped at the next step) do not count against the bound.
    const auto waiting = std::count_if(queue_.begin(), queue_.end(), [](const Queued& q) { return !q.handle->cancelled(); });
    if ((int)waiting >= options_.max_queue) return Submit::QueueFull;
    queue_.push_back({std::move(request), std::move(sink), h, Clock::now()});
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
  {
    std::lock_guard lock(mutex_);
    s.queued = (int)queue_.size();
  }
  s.running = running_count_;
  s.free_blocks = free_blocks_;
  s.total_blocks = cache_.num_blocks();
  s.steps = steps_;
  s.max_batch_rows = max_batch_rows_;
  return s;
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
      free_blocks_ = cache_.free_blocks();
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
    while (!queue_.empty()) {
      Queued& q = queue_.front();
      if (q.handle->cancelled() || !accepting_) {
        dropped.push_back(std::move(q));
        queue_.pop_front();
        continue;
      }
      if ((int)running_.size() >= options_.parallel) break;
      const int positions = (int)q.request.prompt.size() + q.request.max_tokens;
      auto a = std::make_unique<Active>(std::move(q), model_.tokenizer());
      if (!a->kv.reserve(cache_, positions)) {
        // First in, first served: the head waits for blocks rather than being overtaken by smaller jobs.
        q = Queued{std::move(a->request), std::move(a->sink), std::move(a->handle), a->submitted};
        break;
      }
      queue_.pop_front();
      a->admitted = Clock::now();
      a->summary.prompt_tokens = (int)a->request.prompt.size();
      a->summary.queue_seconds = seconds(a->submitted, a->admitted);
      started.push_back(a.get());
      running_.push_back(std::move(a));
    }
  }
  running_count_ = (int)running_.size();
  for (auto& q : dropped) {
    JobSummary s;
    s.reason = StopReason::Cancelled;
    s.prompt_tokens = (int)q.request.prompt.size();
    s.queue_seconds = seconds(q.submitted, Clock::now());
    q.sink->on_finished(s);
  }
  for (Active* a : started) {
    log::debug("event=admitted job={} prompt_tokens={} max_tokens={}", a->request.id, a->request.prompt.size(),
               a->request.max_tokens);
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
  a.summary.error_code = std::move(error_code);
  a.summary.error_message = std::move(error_message);
  a.kv.release(cache_);
  // stats() shows the job gone before its sink hears that it finished (callers check stats after on_finished).
  free_blocks_ = cache_.free_blocks();
  running_count_ = (int)std::count_if(running_.begin(), running_.end(), [](const auto& j) { return !j->done; });
  a.sink->on_finished(a.summary);
}

bool Scheduler::step() {
  const auto now = Clock::now();
  Clock::time_point drain_deadline;
  {
    std::lock_guard lock(mutex_);
    drain_deadline = drain_deadline_;
  }
  for (auto& a : running_) {
    if (a->handle->cancelled() || now >= drain_deadline) {
      finish(*a, StopReason::Cancelled);
    } else if (now >= a->request.deadline) {
      finish(*a, StopReason::Error, "timeout", "the request ran past its time limit");
    }
  }
  running_.remove_if([](const auto& a) { return a->done; });
  admit();
  free_blocks_ = cache_.free_blocks();
  if (running_.empty()) return false;

  // One batch: every decoding job's next token, then prompt chunks up to the prefill budget.
  struct Row {
    Active* job;
    int new_tokens;
  };
  std::vector<Row> rows;
  ForwardBatch batch;
  for (auto& a : running_) {
    if (!a->decoding) continue;
    batch.tokens.push_back(a->next);
    batch.seqs.push_back({&a->kv, 1, a->kv.length + 1, false});
    rows.push_back({a.get(), 1});
  }
  int budget = options_.prefill_budget;
  for (auto& a : running_) {
    if (a->decoding || budget <= 0) continue;
    const int n = std::min((int)a->request.prompt.size() - a->prefilled, budget);
    budget -= n;
    batch.tokens.insert(batch.tokens.end(), a->request.prompt.begin() + a->prefilled,
                        a->request.prompt.begin() + a->prefilled + n);
    batch.seqs.push_back({&a->kv, n, a->prefilled + n, false});
    rows.push_back({a.get(), n});
  }

  Tensor logits;
  try {
    logits = model_.forward(batch, cache_);
  } catch (const std::exception& e) {
    log::error("event=forward_error rows={} error=\"{}\"", rows.size(), e.what());
    for (auto& r : rows) finish(*r.job, StopReason::Error, "forward", e.what());
    running_.remove_if([](const auto& a) { return a->done; });
    running_count_ = (int)running_.size();
    free_blocks_ = cache_.free_blocks();
    steps_++;
    return true;
  }
  steps_++;
  max_batch_rows_ = std::max<int>(max_batch_rows_, (int)batch.tokens.size());

  // Every row's token in one run of the sample op on the model's device: the logits stay there, the ids
  // come back. Rows of prompt chunks that are not a prompt's last are sampled greedily and ignored.
  SampleBatch sampling;
  std::vector<bool> drawn(rows.size(), false);
  for (size_t r = 0; r < rows.size(); ++r) {
    Active& a = *rows[r].job;
    if (a.decoding) {
      a.kv.length += 1;
    } else {
      a.prefilled += rows[r].new_tokens;
      a.kv.length = a.prefilled;
      if (a.prefilled < (int)a.request.prompt.size()) {  // more prompt to go: this row is not used
        sampling.add_unused();
        continue;
      }
      a.decoding = true;
    }
    sampling.add(a.sampler, a.request.prompt, a.generated);
    drawn[r] = true;
  }
  std::vector<TokenId> ids;
  std::string sampling_error;
  try {
    ids = sampling.run(logits);
  } catch (const std::exception& e) {
    sampling_error = e.what();
    log::error("event=sampling_error rows={} error=\"{}\"", rows.size(), e.what());
  }

  for (size_t r = 0; r < rows.size(); ++r) {
    if (!drawn[r]) continue;
    Active& a = *rows[r].job;
    if (!sampling_error.empty()) {
      finish(a, StopReason::Error, "sampling", sampling_error);
      continue;
    }
    const TokenId t = ids[r];
    if (t < 0) {
      finish(a, StopReason::Error, "sampling", "sample: every token is banned by logit_bias");
      continue;
    }
    if (a.generated.empty()) {
      a.first_token = Clock::now();
      a.summary.prompt_seconds = seconds(a.admitted, a.first_token);
    }
    a.generated.push_back(t);
    const int index = (int)a.generated.size() - 1;
    if (!a.request.ignore_eos && std::find(eos_.begin(), eos_.end(), t) != eos_.end()) {
      finish(a, StopReason::Eos);
      continue;
    }
    const std::string safe = a.stops.feed(a.decoder.push(t));
    if (!safe.empty()) {
      a.summary.text += safe;
      a.sink->on_text(index, safe);
    }
    if (a.stops.stopped()) {
      finish(a, StopReason::StopSequence);
    } else if ((int)a.generated.size() >= a.request.max_tokens) {
      finish(a, StopReason::MaxTokens);
    } else {
      a.next = t;
    }
  }
  running_.remove_if([](const auto& a) { return a->done; });
  running_count_ = (int)running_.size();
  free_blocks_ = cache_.free_blocks();
  return true;
}

}  // namespace rbee::llm
