// POST /v1/generate as a server-sent event stream. The generation joins the worker's decode batch
// (Scheduler::submit_generation); its token callback turns each new token and its probe scores into an event and
// queues it on the stream, which the connection's thread writes out. A client that goes away cancels the stream:
// the callback then ends it at its next token and the stream's slot (--max-streams) is freed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "server/handlers.h"

namespace probekit::server {

/// The events of one stream, between the worker (which pushes) and the connection's thread (which writes).
class EventStream {
 public:
  /// `on_release` runs when the stream is gone from both ends: the connection has ended and the worker has dropped
  /// the generation (a cancelled one at its next token). The --max-streams slot is given back there.
  explicit EventStream(std::function<void()> on_release = {}) : on_release_(std::move(on_release)) {}
  ~EventStream();
  EventStream(const EventStream&) = delete;
  EventStream& operator=(const EventStream&) = delete;
  /// Queues an event ("event: NAME\ndata: JSON\n\n"); `last` ends the stream.
  void push(const std::string& name, const Json& data, bool last = false);
  /// Queues a nameless event ("data: TEXT\n\n", as OpenAI's streams send them).
  void push_data(const std::string& text, bool last = false);
  /// Queues nameless events written out at once: a stopping server writes a stream's last write only.
  void push_data(const std::vector<std::string>& texts, bool last);
  /// The next event, waiting at most `wait`; nullopt when none came. `last` tells whether it ends the stream.
  std::optional<std::string> next(std::chrono::milliseconds wait, bool& last);
  /// The client went away, or the connection ended: the generation stops at its next token.
  void cancel();
  bool cancelled() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::pair<std::string, bool>> events_;
  bool cancelled_ = false;
  std::function<void()> on_release_;
};

/// Checks a generation request (the prompt's length, the view) and queues its generation on the worker, which
/// pushes a "token" event per new token ({index, id, token, token_text, text, predictions}) and then "done"
/// ({reason, tokens, text}) or "error" ({error}) onto `stream`. Throws RequestError before anything is queued.
/// The message of the error `error` holds.
std::string message_of(std::exception_ptr error);

void start_generation(const ServerContext& context, const GenerateQuery& query, std::shared_ptr<EventStream> stream,
                      Clock::time_point deadline);

}  // namespace probekit::server
