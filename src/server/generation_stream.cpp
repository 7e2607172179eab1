#include "server/generation_stream.h"

#include <fmt/format.h>

#include <algorithm>

#include "generation/flags.h"
#include "inference/generation_view.h"
#include "inference/reports.h"
#include "monitor/actions.h"

namespace probekit::server {

EventStream::~EventStream() {
  if (on_release_) on_release_();
}

void EventStream::push(const std::string& name, const Json& data, bool last) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.emplace_back(fmt::format("event: {}\ndata: {}\n\n", name, dump_json(data)), last);
  }
  ready_.notify_all();
}

void EventStream::push_data(const std::string& text, bool last) { push_data(std::vector<std::string>{text}, last); }

void EventStream::push_data(const std::vector<std::string>& texts, bool last) {
  std::string events;
  for (const std::string& text : texts) events += fmt::format("data: {}\n\n", text);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.emplace_back(std::move(events), last);
  }
  ready_.notify_all();
}

std::optional<std::string> EventStream::next(std::chrono::milliseconds wait, bool& last) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!ready_.wait_for(lock, wait, [this] { return !events_.empty(); })) return std::nullopt;
  auto [event, ends] = std::move(events_.front());
  events_.pop_front();
  last = ends;
  return event;
}

void EventStream::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
}

bool EventStream::cancelled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cancelled_;
}

namespace {

// What the request asks of the generation loop: the model's eos ids as stop ids (or suppressed, "stop": false).
generation::GenerationOptions options_for(const ServerContext& context, const GenerateQuery& query) {
  generation::GenerationFlags flags;
  flags.options.max_new_tokens = query.max_new_tokens;
  flags.options.sampling = {query.temperature, query.sample_top_k, query.top_p, query.seed};
  flags.no_stop = !query.stop;
  try {
    return generation::resolve_generation_flags(flags, context.engine.model_dir());
  } catch (const std::invalid_argument& e) {
    throw RequestError(400, e.what());
  }
}

// Whether a monitor's firing steered the stream (steer, ablate) after it began.
bool steered_by_monitor(const std::vector<monitor::Firing>& firings) {
  return std::any_of(firings.begin(), firings.end(), [](const monitor::Firing& firing) {
    const monitor::ActionRow* action = monitor::find_action(firing.action);
    return action != nullptr && action->steering != monitor::ActionSteering::kNone;
  });
}

// The generation's end as the stream's last event: "done", or "error" (its time was up, the server is stopping,
// the model failed).
void push_end(EventStream& stream, const inference::GeneratedText& done, std::exception_ptr error, bool timed_out,
              bool steered, bool monitored, bool stopping) {
  if (error) return stream.push("error", error_body(message_of(error), ""), true);
  if (timed_out) {
    return stream.push("error", error_body("the stream took longer than this server's time limit per request (--request-timeout)", ""), true);
  }
  if (stopping) return stream.push("error", error_body("the server is shutting down", ""), true);
  Json finished = {{"reason", generation::stop_reason_name(done.stop)}, {"tokens", done.ids.size()}, {"text", done.text}};
  if (steered || steered_by_monitor(done.firings)) finished["steered"] = true;
  if (monitored) finished["monitor_firings"] = monitor::firings_json(done.firings);
  stream.push("done", finished, true);
}

}  // namespace

std::string message_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

void start_generation(const ServerContext& context, const GenerateQuery& query, std::shared_ptr<EventStream> stream,
                      Clock::time_point deadline) {
  check_view(context, query.view);
  require_texts(context, "prompt");  // a chat's prompt is /v1/chat/completions'
  inference::StreamRequest request;
  // Counted as generated from: with the special tokens in front (regression: counted without them, one over).
  request.prompt_ids = context.engine.tokenizer().encode(query.prompt, true);
  check_token_count(context, request.prompt_ids.size(), "prompt");
  request.options = options_for(context, query);
  request.steering = resolve_steering(context, query.steering);
  request.monitors = resolve_monitors(context, query.monitors);
  auto text = std::make_shared<std::string>();
  auto timed_out = std::make_shared<bool>(false);
  const ViewQuery view = query.view;
  request.on_token = [context, view, stream, deadline, text, timed_out](const inference::ScoredToken& token) {
    if (stream->cancelled() || context.scheduler.stopping()) return false;
    *text += token.text;
    std::vector<inference::Prediction> ranked =
        inference::top_predictions(query_table(context, token.probability, view), view.top_k);
    Json event = {{"index", token.index}, {"id", token.id}, {"token", token.token}, {"token_text", token.text},
                  {"text", *text}, {"predictions", inference::predictions_json(ranked)}};
    if (!token.firings.empty()) event["monitor"] = token.firings.front().to_json();
    if (token.firings.size() > 1) event["monitors"] = monitor::firings_json(token.firings);
    if (!token.latents.empty()) event["latents"] = inference::token_latents_json(token.latents);
    stream->push("token", event);
    *timed_out = Clock::now() >= deadline;
    return !*timed_out;
  };
  request.on_end = [context, stream, timed_out, steered = request.steering != nullptr, monitored = request.monitors != nullptr](
                       const inference::GeneratedText& done, std::exception_ptr error) {
    push_end(*stream, done, error, *timed_out, steered, monitored, context.scheduler.stopping());
  };
  request.abandoned = [stream] { return stream->cancelled(); };
  context.scheduler.submit_generation(std::move(request), deadline);
}

}  // namespace probekit::server
