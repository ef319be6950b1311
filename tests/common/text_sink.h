// A JobSink for scheduler tests that records every event of one job: started, the text and the choice index of
// each piece, log-probabilities (per token and of the prompt), a pooled embedding, and the summary. wait() blocks
// until on_finished has run; on_text_hook, when set, runs inside on_text (a test's way to act mid-generation).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "rbee/llm/scheduler.h"

namespace rbee::llm {

class TextSink : public JobSink {
 public:
  void on_started() override {
    std::lock_guard lock(m_);
    started = true;
  }
  void on_text(int index, const std::string& t) override {
    std::lock_guard lock(m_);
    text += t;
    indices.push_back(index);
    if (on_text_hook) on_text_hook();
  }
  void on_logprobs(int, const TokenLogprob& lp) override {
    std::lock_guard lock(m_);
    logprobs.push_back(lp);
  }
  void on_prompt_logprobs(const std::vector<TokenLogprob>& lps) override {
    std::lock_guard lock(m_);
    prompt_logprobs = lps;
  }
  void on_embedding(const std::vector<float>& v) override {
    std::lock_guard lock(m_);
    embedding = v;
  }
  void on_finished(const JobSummary& s) override {
    std::lock_guard lock(m_);
    summary = s;
    done = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return done; });
  }
  // Pieces of text received so far.
  int texts() {
    std::lock_guard lock(m_);
    return (int)indices.size();
  }
  bool started = false, done = false;
  std::string text;
  std::vector<int> indices;
  std::vector<TokenLogprob> logprobs, prompt_logprobs;
  std::vector<float> embedding;
  JobSummary summary;
  std::function<void()> on_text_hook;

 private:
  std::mutex m_;
  std::condition_variable cv_;
};

}  // namespace rbee::llm
