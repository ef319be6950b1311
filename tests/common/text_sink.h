// A JobSink for scheduler tests: collects a job's text and its summary; wait() blocks until the job finished.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>

#include "rbee/llm/scheduler.h"

namespace rbee::llm {

class TextSink : public JobSink {
 public:
  void on_started() override {}
  void on_text(int, const std::string& t) override {
    std::lock_guard lock(m_);
    text += t;
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
  std::string text;
  JobSummary summary;
  bool done = false;

 private:
  std::mutex m_;
  std::condition_variable cv_;
};

}  // namespace rbee::llm
