#include "server/generation_stream.h"

#include <fmt/format.h>

#include "generation/flags.h"
#include "inference/reports.h"

namespace probekit::server {

void EventStream::push(const std::string& name, const Json& data, bool last) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.emplace_back(fmt::format("event: {}\ndata: {}\n\n", name, dump_json(data)), last);
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

// Runs on the worker: the generation, an event per token, and between tokens the rankings queued meanwhile.
void generate_into(const ServerContext& context, const GenerateQuery& query, const generation::GenerationOptions& options,
                   EventStream& stream, Clock::time_point deadline) {
  std::string text;
  bool timed_out = false;
  auto on_token = [&](const inference::ScoredToken& token) {
    if (stream.cancelled() || context.scheduler.stopping()) return false;
    text += token.text;
    std::vector<inference::Prediction> ranked = inference::all_predictions(query_table(context, token.probability, query.view));
    ranked.resize(std::min<size_t>(ranked.size(), static_cast<size_t>(query.view.top_k)));
    stream.push("token", {{"index", token.index}, {"id", token.id}, {"token", token.token}, {"token_text", token.text},
                          {"text", text}, {"predictions", inference::predictions_json(ranked)}});
    if (Clock::now() >= deadline) {
      timed_out = true;
      return false;
    }
    context.scheduler.serve_queued_rankings();
    return true;
  };
  std::vector<inference::GeneratedText> done = context.engine.generate({query.prompt}, options, on_token);
  if (timed_out) {
    stream.push("error", error_body("the stream took longer than this server's time limit per request (--request-timeout)", ""), true);
  } else if (context.scheduler.stopping()) {
    stream.push("error", error_body("the server is shutting down", ""), true);
  } else {
    Json finished = {{"reason", generation::stop_reason_name(done.front().stop)},
                     {"tokens", done.front().ids.size()},
                     {"text", done.front().text}};
    if (options.writes != nullptr) finished["steered"] = true;
    stream.push("done", finished, true);
  }
}

}  // namespace

void start_generation(const ServerContext& context, const GenerateQuery& query, std::shared_ptr<EventStream> stream,
                      Clock::time_point deadline) {
  check_view(context, query.view);
  check_text_length(context, query.prompt, "prompt");
  generation::GenerationOptions options = options_for(context, query);
  std::shared_ptr<const steering::SteeringVectors> steering = resolve_steering(context, query.steering);
  context.scheduler.submit_alone(
      [context, query, options, steering, stream, deadline](std::exception_ptr refused) {
        try {
          if (refused) std::rethrow_exception(refused);
          const model::StreamWrites writes =
              steering ? steering::place(*steering, context.engine.model()) : model::StreamWrites();
          generation::GenerationOptions steered = options;
          if (steering) steered.writes = &writes;
          generate_into(context, query, steered, *stream, deadline);
        } catch (const std::exception& e) {
          stream->push("error", error_body(e.what(), ""), true);
        }
      },
      deadline);
}

}  // namespace probekit::server
