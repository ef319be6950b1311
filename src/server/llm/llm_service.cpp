#include "server/llm/llm_service.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "rbee/llm/prompt.h"
#include "server/api_error.h"
#include "server/llm/job_stream.h"
#include "server/util.h"

namespace rbee::server::llm_api {

namespace {
// An rbee::Error from tokenizing or submitting, as a 400 naming the field its message starts with.
ApiError as_api_error(const Error& e, const std::string& default_field) {
  if (e.code() == ErrorCode::InvalidArgument || e.code() == ErrorCode::NotFound) {
    std::string field = default_field;
    const std::string& msg = e.message();
    const size_t colon = msg.find(':');
    static const char* known[] = {"prompt", "max_tokens", "messages", "temperature", "top_p", "top_k", "min_p",
                                  "repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias", "n",
                                  "min_tokens", "stop_token_ids", "top_logprobs"};
    for (const char* k : known) {
      const size_t len = std::string(k).size();
      if (msg.rfind(k, 0) == 0 && colon == len) field = k;
    }
    return ApiError(400, "invalid_request", msg, field);
  }
  return ApiError(500, "internal_error", e.message());
}

std::vector<llm::TokenId> checked_ids(const std::vector<int64_t>& ids, int64_t vocab, const std::string& where) {
  std::vector<llm::TokenId> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= vocab) {
      throw invalid_field(fmt::format("{}[{}]", where, i), fmt::format("token id {} is outside [0, {})", id, vocab));
    }
    out.push_back((llm::TokenId)id);
  }
  return out;
}

llm::ChatPrompt chat_prompt(const InferRequest& r, const std::string& template_source) {
  llm::ChatPrompt chat;
  chat.template_source = template_source;
  chat.messages = r.messages;
  if (r.tool_choice != ToolChoice::None) chat.tools = r.tools;
  chat.extra = r.chat_template_kwargs;
  const bool last_is_assistant = !r.messages.empty() && r.messages.back().value("role", "") == "assistant";
  // A conversation that ends with the assistant's words is continued (prefill) unless the request says otherwise.
  chat.continue_final_message = r.continue_final_message.value_or(last_is_assistant && !r.add_generation_prompt);
  chat.add_generation_prompt = r.add_generation_prompt.value_or(!chat.continue_final_message);
  return chat;
}
}  // namespace

LlmService::LlmService(llm::Model& model, llm::Scheduler& scheduler, Metrics& metrics, ServiceOptions options)
    : model_(model), scheduler_(scheduler), metrics_(metrics), options_(std::move(options)) {
  template_ = options_.chat_template.empty() ? model_.config().chat_template : options_.chat_template;
  const llm::Tokenizer& tok = model_.tokenizer();
  tool_support_ = llm::template_supports_tools(template_, tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "",
                                               tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : "");
  tool_format_ = llm::detect_tool_format(template_);
  log::info("event=chat_template source={} tools={} tool_format={}",
            options_.chat_template.empty() ? "model" : "--chat-template", tool_support_ ? "yes" : "no",
            llm::tool_format_name(tool_format_));
}

std::shared_ptr<const llm::grammar::Vocabulary> LlmService::vocabulary() {
  std::lock_guard lock(vocab_mutex_);
  if (!vocab_) vocab_ = std::make_shared<const llm::grammar::Vocabulary>(model_.tokenizer());
  return vocab_;
}

llm::grammar::ConstraintCache& LlmService::grammars() {
  auto vocab = vocabulary();
  std::lock_guard lock(vocab_mutex_);
  if (!grammars_) grammars_ = std::make_unique<llm::grammar::ConstraintCache>(std::move(vocab));
  return *grammars_;
}

std::string LlmService::render_messages(const InferRequest& r) {
  try {
    return llm::render_chat(model_, chat_prompt(r, options_.chat_template));
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request", "field 'messages': the chat template refused them: " + e.message(),
                   "messages");
  }
}

std::vector<std::vector<llm::TokenId>> LlmService::prompt_tokens(const InferRequest& r) {
  std::vector<std::vector<llm::TokenId>> out;
  if (!r.messages.is_null()) {
    const std::string text = render_messages(r);
    out.push_back(model_.tokenizer().encode(text, /*add_special=*/false, /*parse_special=*/true));
    return out;
  }
  const int64_t vocab = model_.config().vocab_size;
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    const PromptInput& p = r.prompts[i];
    const std::string where = r.prompts.size() > 1 ? fmt::format("prompt[{}]", i) : "prompt";
    if (p.is_ids) {
      out.push_back(checked_ids(p.ids, vocab, where));
      continue;
    }
    try {
      out.push_back(llm::text_tokens(model_, p.text, r.parse_special, r.add_special_tokens));
    } catch (const Error& e) {
      throw as_api_error(e, where);
    }
  }
  return out;
}

std::shared_ptr<LlmJob> LlmService::start(const InferRequest& r) {
  if (!r.model.empty()) {
    bool known = r.model == options_.model_name;
    for (const auto& a : options_.model_aliases) known = known || r.model == a;
    if (!known) {
      throw ApiError(404, "model_not_found",
                     "field 'model': this worker serves \"" + options_.model_name + "\", not \"" + r.model + "\"",
                     "model");
    }
  }
  if (r.tool_choice != ToolChoice::None && !tool_support_) {
    throw ApiError(400, "unsupported",
                   "field 'tools': this model's chat template has no tool support (it does not show tools to the "
                   "model); start the worker with --chat-template naming a template that does, or leave tools out",
                   "tools");
  }
  const std::vector<std::vector<llm::TokenId>> prompts = prompt_tokens(r);
  const std::string prompt_field = r.messages.is_null() ? "prompt" : "messages";
  const int capacity = scheduler_.max_positions();
  const int64_t vocab = model_.config().vocab_size;
  llm::JobRequest base;
  base.sampling.temperature = (float)r.temperature;
  base.sampling.top_p = (float)r.top_p;
  base.sampling.top_k = (int)r.top_k;
  base.sampling.min_p = (float)r.min_p;
  base.sampling.repetition_penalty = (float)r.repetition_penalty;
  base.sampling.presence_penalty = (float)r.presence_penalty;
  base.sampling.frequency_penalty = (float)r.frequency_penalty;
  for (const auto& [id, bias] : r.logit_bias) {
    if (id < 0 || id >= vocab) {
      throw invalid_field("logit_bias", fmt::format("token id {} is outside [0, {})", id, vocab));
    }
    // OpenAI's -100 means "never": a ban, not a nudge.
    base.sampling.logit_bias[(llm::TokenId)id] = bias <= -100.0 ? -INFINITY : (float)bias;
  }
  if (r.seed) {
    base.sampling.has_seed = true;
    base.sampling.seed = (uint64_t)*r.seed;
  }
  base.stop = r.stop;
  base.stop_token_ids = checked_ids(r.stop_token_ids, vocab, "stop_token_ids");
  base.ignore_eos = r.ignore_eos;
  base.min_tokens = (int)r.min_tokens;
  base.n = (int)r.n;
  base.top_logprobs = (int)r.top_logprobs;
  base.prompt_logprobs = r.echo && r.top_logprobs >= 0;
  // Tool calls in the model's own format keep its markers (often special tokens) in the text for the parser.
  base.skip_special = r.tool_choice != ToolChoice::Auto;
  if (r.grammar) {
    try {
      base.constraint = grammars().get(r.grammar);
    } catch (const Error& e) {
      throw invalid_field(r.grammar_field.empty() ? "grammar" : r.grammar_field, e.message());
    }
  }
  base.deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(options_.request_timeout_s));

  std::vector<llm::JobRequest> jobs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string where = prompts.size() > 1 ? fmt::format("{}[{}]", prompt_field, i) : prompt_field;
    llm::JobRequest job = base;
    job.prompt = prompts[i];
    if (job.prompt.empty()) throw invalid_field(where, "gives no tokens");
    const int left = capacity - (int)job.prompt.size();
    if (left < 1) {
      throw invalid_field(where, fmt::format("is {} tokens; the context holds {} positions", job.prompt.size(), capacity));
    }
    if (r.max_tokens) {
      if (*r.max_tokens > left) {
        throw invalid_field("max_tokens", fmt::format("the prompt ({} tokens) + max_tokens ({}) exceeds the context of "
                                                      "{} positions",
                                                      job.prompt.size(), *r.max_tokens, capacity));
      }
      job.max_tokens = (int)*r.max_tokens;
    } else {
      job.max_tokens = std::min(options_.default_max_tokens, left);
    }
    job.min_tokens = std::min(job.min_tokens, job.max_tokens);
    jobs.push_back(std::move(job));
  }

  const char* prefix = r.api == Api::Chat ? "chatcmpl" : r.api == Api::Completions ? "cmpl" : "job";
  const int n = (int)r.n;
  auto out = std::make_shared<LlmJob>(random_id(prefix), r.api, metrics_, (int)prompts.size() * n);
  for (const auto& p : prompts) out->prompt_tokens += (int)p.size();
  out->n = n;
  out->tool_choice = r.tool_choice;
  out->tool_name = r.tool_name;
  out->tool_format = tool_format_;
  if (r.echo) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      out->echo_texts.push_back(r.prompts[i].is_ids ? model_.tokenizer().decode(prompts[i]) : r.prompts[i].text);
    }
  }
  collect_garbage();
  {
    // Registered before submitting so that the scheduler's first event finds it; removed again on refusal.
    std::lock_guard lock(mutex_);
    jobs_[out->id] = out;
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].id = jobs.size() > 1 ? fmt::format("{}/{}", out->id, i) : out->id;
    std::shared_ptr<llm::JobHandle> handle;
    llm::Scheduler::Submit status;
    try {
      status = scheduler_.submit(std::move(jobs[i]), out->sinks((int)i * n, n), &handle);
    } catch (const Error& e) {
      out->cancel();
      forget(out->id);
      throw as_api_error(e, prompt_field);
    }
    if (status != llm::Scheduler::Submit::Accepted) {
      out->cancel();
      forget(out->id);
      if (status == llm::Scheduler::Submit::QueueFull) {
        throw ApiError(429, "queue_full",
                       fmt::format("the queue is full ({} jobs waiting); retry later", scheduler_.options().max_queue),
                       "", options_.retry_after_s);
      }
      throw ApiError(503, "shutting_down", "the worker is shutting down", "", 5);
    }
    out->add_handle(handle);
  }
  metrics_.add("rbee_prompt_tokens_total", out->prompt_tokens);
  log::info("job={} event=submitted api={} prompts={} n={} prompt_tokens={} max_tokens={} temperature={} seed={}",
            out->id, r.api == Api::Chat ? "chat" : r.api == Api::Completions ? "completions" : "jobs", prompts.size(), n,
            out->prompt_tokens, r.max_tokens ? std::to_string(*r.max_tokens) : "default", r.temperature,
            r.seed ? std::to_string(*r.seed) : "none");
  return out;
}

Embeddings LlmService::embed(const EmbeddingRequest& e, const std::function<bool()>& client_gone) {
  if (!e.model.empty()) {
    bool known = e.model == options_.model_name;
    for (const auto& a : options_.model_aliases) known = known || e.model == a;
    if (!known) {
      throw ApiError(404, "model_not_found",
                     "field 'model': this worker serves \"" + options_.model_name + "\", not \"" + e.model + "\"",
                     "model");
    }
  }
  const int hidden = model_.config().hidden_size;
  int dims = hidden;
  if (e.dimensions && *e.dimensions != hidden) {
    if (!options_.matryoshka || *e.dimensions > hidden) {
      throw invalid_field("dimensions",
                          fmt::format("this model's embeddings have {} dimensions{}", hidden,
                                      options_.matryoshka ? "; ask for at most that many"
                                                          : " and it does not allow fewer (no --matryoshka)"));
    }
    dims = (int)*e.dimensions;
  }
  InferRequest as_prompts;
  as_prompts.prompts = e.inputs;
  std::vector<std::vector<llm::TokenId>> prompts;
  try {
    prompts = prompt_tokens(as_prompts);
  } catch (const ApiError& err) {
    // prompt_tokens names "prompt"; this route calls it "input".
    std::string param = err.param();
    std::string msg = err.message();
    if (param.rfind("prompt", 0) == 0) {
      const std::string renamed = "input" + param.substr(6);
      const size_t at = msg.find(param);
      if (at != std::string::npos) msg.replace(at, param.size(), renamed);
      param = renamed;
    }
    throw ApiError(err.status(), err.code(), msg, param);
  }
  const int capacity = scheduler_.max_positions();
  Embeddings out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string where = prompts.size() > 1 ? fmt::format("input[{}]", i) : "input";
    if (prompts[i].empty()) throw invalid_field(where, "gives no tokens");
    if ((int)prompts[i].size() > capacity) {
      throw invalid_field(where, fmt::format("is {} tokens; the context holds {} positions", prompts[i].size(), capacity));
    }
    out.prompt_tokens += (int)prompts[i].size();
  }
  const size_t wave = (size_t)std::max(1, scheduler_.options().parallel);
  for (size_t first = 0; first < prompts.size(); first += wave) {
    const size_t count = std::min(wave, prompts.size() - first);
    auto job = std::make_shared<LlmJob>(random_id("emb"), Api::Jobs, metrics_, (int)count);
    {
      std::lock_guard lock(mutex_);
      jobs_[job->id] = job;
    }
    for (size_t k = 0; k < count; ++k) {
      llm::JobRequest r;
      r.id = job->id;
      r.prompt = prompts[first + k];
      r.embed = true;
      r.pooling = options_.pooling;
      r.normalize = true;
      r.deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                          std::chrono::duration<double>(options_.request_timeout_s));
      std::shared_ptr<llm::JobHandle> handle;
      llm::Scheduler::Submit status;
      try {
        status = scheduler_.submit(std::move(r), job->sinks((int)k, 1), &handle);
      } catch (const Error& err) {
        job->cancel();
        forget(job->id);
        throw as_api_error(err, "input");
      }
      if (status != llm::Scheduler::Submit::Accepted) {
        job->cancel();
        forget(job->id);
        if (status == llm::Scheduler::Submit::QueueFull) {
          throw ApiError(429, "queue_full", "the queue is full; retry later", "", options_.retry_after_s);
        }
        throw ApiError(503, "shutting_down", "the worker is shutting down", "", 5);
      }
      job->add_handle(handle);
    }
    const JobResult result = wait_for_job(*this, job, client_gone);
    for (const ChoiceResult& c : result.choices) {
      std::vector<float> v = c.embedding;
      if ((int)v.size() != hidden) throw ApiError(500, "internal_error", "an embedding job returned no vector");
      if (dims < hidden) {
        // Matryoshka: the leading dimensions, scaled back to unit length.
        v.resize((size_t)dims);
        double norm = 0;
        for (float x : v) norm += (double)x * x;
        norm = std::sqrt(norm);
        if (norm > 0)
          for (float& x : v) x = (float)(x / norm);
      }
      out.vectors.push_back(std::move(v));
    }
  }
  metrics_.add("rbee_prompt_tokens_total", out.prompt_tokens);
  metrics_.add("rbee_embeddings_total", (double)out.vectors.size());
  return out;
}

std::shared_ptr<LlmJob> LlmService::find(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second;
}

void LlmService::forget(const std::string& id) {
  std::lock_guard lock(mutex_);
  jobs_.erase(id);
}

size_t LlmService::jobs() const {
  std::lock_guard lock(mutex_);
  return jobs_.size();
}

size_t LlmService::streaming() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [id, job] : jobs_) n += job->consumer_attached ? 1 : 0;
  return n;
}

void LlmService::collect_garbage() {
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  const int64_t ttl_ms = (int64_t)(options_.job_ttl_s * 1000);
  std::lock_guard lock(mutex_);
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const LlmJob& j = *it->second;
    if (j.finished && !j.consumer_attached && now_ms - j.finished_at_ms > ttl_ms) it = jobs_.erase(it);
    else ++it;
  }
}

}  // namespace rbee::server::llm_api
