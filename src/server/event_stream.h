// Writing a job's events to an HTTP response as a Server-Sent Events stream, for every worker: each event is
// flushed as it comes, a comment goes out every second while idle (so that a client that hung up is noticed),
// and when the channel closes the stream ends with `data: [DONE]`. on_drained() runs when the channel has closed,
// before `[DONE]` is written (so a client that has read `[DONE]` can be told the job is gone before on_close ran);
// on_close(completed) runs once the response is over: completed is false when the client went away first (the
// worker then cancels the job).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <httplib.h>

#include "server/channel.h"
#include "server/sse.h"

namespace rbee::server {

// `owner` keeps `events` alive for the stream's life (the job that holds the channel). format turns one event
// into SSE frames (possibly several, possibly none).
template <typename Event>
void stream_events(httplib::Response& res, std::shared_ptr<void> owner, Channel<Event>& events,
                   std::function<std::string(const Event&)> format, std::function<void(bool completed)> on_close,
                   std::function<void()> on_drained = {}) {
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto done = std::make_shared<bool>(false);
  Channel<Event>* channel = &events;
  res.set_chunked_content_provider(
      kSseContentType,
      [owner, channel, format = std::move(format), done, on_drained = std::move(on_drained)](size_t,
                                                                                            httplib::DataSink& sink) {
        Event ev;
        switch (channel->pop(ev, std::chrono::milliseconds(1000))) {
          case Channel<Event>::Pop::Item: {
            const std::string frames = format(ev);
            return frames.empty() || sink.write(frames.data(), frames.size());
          }
          case Channel<Event>::Pop::Timeout: {
            const std::string ping = sse_comment("keep-alive");
            return sink.write(ping.data(), ping.size());
          }
          case Channel<Event>::Pop::Closed: {
            const std::string end = sse_done();
            if (!*done && on_drained) on_drained();
            *done = true;
            if (!sink.write(end.data(), end.size())) return false;
            sink.done();
            return true;
          }
        }
        return false;
      },
      [owner, done, on_close = std::move(on_close)](bool success) { on_close(success && *done); });
}

}  // namespace rbee::server
