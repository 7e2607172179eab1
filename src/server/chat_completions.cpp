#include "server/chat_completions.h"

#include <fmt/format.h>

#include <atomic>
#include <future>
#include <random>

#include "chat/render_budget.h"
#include "chat/template_error.h"
#include "generation/flags.h"
#include "inference/generation_view.h"
#include "inference/reports.h"
#include "inference/stream_batch.h"
#include "server/api/stop_text.h"

namespace probekit::server {

namespace {

// The fields every completion and chunk of one request share.
struct ReplyHeader {
  std::string id;
  int64_t created = 0;
  std::string model;
};

Json header_json(const ReplyHeader& header, const char* object) {
  return {{"id", header.id}, {"object", object}, {"created", header.created}, {"model", header.model},
          {"system_fingerprint", nullptr}};
}

std::string completion_id() {
  std::random_device device;
  std::mt19937_64 random((static_cast<uint64_t>(device()) << 32) ^ device());
  return fmt::format("chatcmpl-{:016x}{:08x}", random(), static_cast<uint32_t>(random()));
}

// The prompt the checkpoint's template renders, within the sandbox's bounds and the request's deadline: a template
// that passes them answers this request (400, or 408 out of time) and nobody else's.
// OpenAI's clients send "developer" for what the checkpoints' templates call "system"; a template that knows the
// role (gpt-oss's) gets it as sent (regression: other templates failed on a role they never heard of). The prompt
// and the probes' mask both read these messages.
OrderedJson template_messages(const ChatModel& model, const ChatQuery& query) {
  OrderedJson messages = query.messages;
  if (model.chat_template && !model.chat_template->names("developer")) {
    for (auto& message : messages) {
      if (message.at("role") == "developer") message["role"] = "system";
    }
  }
  return messages;
}

std::string render_prompt(const ChatModel& model, const OrderedJson& messages, const ChatQuery& query,
                          Clock::time_point deadline) {
  if (!model.chat_template) throw RequestError(400, model.problem, "messages");
  chat::ChatTemplateInputs inputs;
  inputs.messages = messages;
  inputs.tools = query.tools;
  inputs.add_generation_prompt = true;
  inputs.limits.deadline = deadline;
  try {
    model.chat_template->check_tools(query.tools);
  } catch (const chat::TemplateError& e) {
    throw RequestError(400, e.what(), "tools");
  }
  try {
    return model.chat_template->render(inputs);
  } catch (const chat::RenderBudgetExceeded& e) {
    if (e.timed_out()) {
      throw RequestError(408, fmt::format("the model's chat template did not finish rendering these messages within the "
                                          "request's time (--request-timeout): {}", e.what()), "messages");
    }
    throw RequestError(400, fmt::format("the model's chat template passed its sandbox's bounds on these messages: {}", e.what()),
                       "messages");
  } catch (const chat::TemplateRaised& e) {
    throw RequestError(400, fmt::format("the model's chat template refuses these messages: {}", e.what()), "messages");
  } catch (const chat::TemplateError& e) {
    throw RequestError(400, fmt::format("the model's chat template failed on these messages: {}", e.what()), "messages");
  } catch (const std::invalid_argument& e) {  // messages or tools the template cannot take (nested past its bound)
    throw RequestError(400, e.what(), "messages");
  }
}

// The request's generation, checked and resolved in the request's thread: the prompt's ids (the rendered text
// holds its special tokens: none are added), the sampling, the model's eos ids, the steering.
inference::StreamRequest prepare(const ServerContext& context, const ChatModel& model, const ChatQuery& query,
                                 Clock::time_point deadline) {
  check_view(context, query.probes, "probes.");
  inference::StreamRequest request;
  const OrderedJson messages = template_messages(model, query);
  const std::string rendered = render_prompt(model, messages, query, deadline);
  request.prompt_ids = context.engine.tokenizer().encode(rendered, false);
  const int64_t limit = context.options.limits.max_tokens;
  if (static_cast<int64_t>(request.prompt_ids.size()) > limit) {
    throw RequestError(413, fmt::format("the rendered 'messages' are {} tokens long, more than this server's limit of {} "
                                        "tokens per prompt (--max-tokens)", request.prompt_ids.size(), limit),
                       "messages");
  }
  chat::RenderLimits limits;
  limits.deadline = deadline;
  try {
    request.prompt_mask =
        context.engine.chat_prompt_mask({messages, query.tools}, rendered, request.prompt_ids, limits);
  } catch (const std::exception& e) {  // the probes' template is another, or the messages cannot be located in it
    throw RequestError(400, fmt::format("the probes cannot read these messages: {}", e.what()), "messages");
  }
  generation::GenerationFlags flags;
  flags.options.max_new_tokens = query.max_tokens;
  flags.options.sampling = {query.temperature, 0, query.top_p, query.seed ? *query.seed : std::random_device()()};
  try {
    request.options = generation::resolve_generation_flags(flags, context.engine.model_dir());
  } catch (const std::invalid_argument& e) {
    throw RequestError(400, e.what());
  }
  request.steering = resolve_steering(context, query.steering);
  request.monitors = resolve_monitors(context, query.monitors);
  return request;
}

Json token_predictions(const ServerContext& context, const ViewQuery& view, const inference::ScoredToken& token) {
  std::vector<inference::Prediction> ranked =
      inference::top_predictions(query_table(context, token.probability, view), view.top_k);
  return inference::predictions_json(ranked);
}

// A monitor's stop is the OpenAI API's content_filter: the reply was cut because of what it was becoming.
const char* finish_reason(const inference::GeneratedText& done, const StopText& stop) {
  if (done.stop == generation::StopReason::kMonitor) return "content_filter";
  return stop.stopped() || done.stop == generation::StopReason::kEos ? "stop" : "length";
}

// A token's chunk or probe entry with the monitors that fired at it ("monitor" the first, "monitors" all when
// several did) and, with --sae, each SAE's largest latents at it ("latents").
void add_firings_and_latents(Json& out, const inference::ScoredToken& token) {
  if (!token.firings.empty()) out["monitor"] = token.firings.front().to_json();
  if (token.firings.size() > 1) out["monitors"] = monitor::firings_json(token.firings);
  if (!token.latents.empty()) out["latents"] = inference::token_latents_json(token.latents);
}

Json usage_json(const inference::GeneratedText& done) {
  return {{"prompt_tokens", done.prompt_ids.size()}, {"completion_tokens", done.ids.size()},
          {"total_tokens", done.prompt_ids.size() + done.ids.size()}};
}

RequestError timeout() {
  return RequestError(408, "the reply took longer than this server's time limit per request (--request-timeout)");
}

// A reply the server's shutdown ended: not finished, so no finish_reason (regression: it was "length").
RequestError shutting_down() { return RequestError(503, "the server is shutting down: the reply was not finished"); }

// What a reply's callbacks share: they run on the worker, one after another.
struct ReplyState {
  explicit ReplyState(std::vector<std::string> stops) : stop(std::move(stops)) {}
  StopText stop;
  size_t streamed = 0;  // bytes of the tokens' texts given to `stop`
  bool timed_out = false;
  bool shut_down = false;  // the server began stopping while the reply was generated
  std::atomic<bool> abandoned{false};
  std::shared_ptr<void> slot;  // the request's --max-streams slot, given back when the worker lets the reply go
  Json steering;               // the request's (SteeringVectors::record()); null: none
  Json probes = Json::array();
  std::promise<Json> completion;
};

// The text `stop` holds back, after the reply's last piece: the bytes of a character whose tokens the reply stopped
// inside, which only the finished text holds (regression: a monitor's stop after a byte token sent no text for it).
std::string rest_of_reply(ReplyState& state, const inference::GeneratedText& done) {
  std::string rest = done.text.size() > state.streamed ? state.stop.add(done.text.substr(state.streamed)) : "";
  return rest + state.stop.flush();
}

// Gives a token's text to the stop strings; returns what may be sent now.
std::string add_piece(ReplyState& state, const std::string& piece) {
  state.streamed += piece.size();
  return state.stop.add(piece);
}

}  // namespace

ChatModel ChatModel::load(const std::string& name, const std::string& dir) {
  ChatModel model;
  model.name = name;
  model.created = static_cast<int64_t>(std::time(nullptr));
  try {
    model.chat_template = std::make_shared<const chat::ChatTemplate>(chat::ChatTemplate::from_tokenizer_dir(dir));
  } catch (const std::exception& e) {
    model.problem = fmt::format("this model cannot chat: {}", e.what());
  }
  return model;
}

namespace {

Json model_json(const ChatModel& model) {
  return {{"id", model.name}, {"object", "model"}, {"created", model.created}, {"owned_by", "probekit"}};
}

}  // namespace

Json models_response(const ChatModel& model) { return {{"object", "list"}, {"data", Json::array({model_json(model)})}}; }

Json model_response(const ChatModel& model, const std::string& id) {
  if (id != model.name) {
    throw RequestError(404, fmt::format("the model '{}' does not exist: this server serves '{}'", id, model.name), "model");
  }
  return model_json(model);
}

Json chat_completion_response(const ServerContext& context, const ChatModel& model, const ChatQuery& query,
                              Clock::time_point deadline, std::shared_ptr<void> slot) {
  inference::StreamRequest request = prepare(context, model, query, deadline);
  const ReplyHeader header{completion_id(), static_cast<int64_t>(std::time(nullptr)), model.name};
  auto state = std::make_shared<ReplyState>(query.stop);
  state->slot = std::move(slot);
  const ViewQuery view = query.probes;
  request.on_token = [context, view, state, deadline](const inference::ScoredToken& token) {
    state->shut_down = context.scheduler.stopping();
    if (state->abandoned || state->shut_down) return false;
    add_piece(*state, token.text);
    Json entry = {{"index", token.index}, {"token", token.token}, {"text", token.text},
                  {"predictions", token_predictions(context, view, token)}};
    add_firings_and_latents(entry, token);
    state->probes.push_back(std::move(entry));
    state->timed_out = Clock::now() >= deadline;
    return !state->stop.stopped() && !state->timed_out;
  };
  if (request.steering) state->steering = request.steering->record();
  const bool monitored = request.monitors != nullptr;
  request.on_end = [state, header, monitored](const inference::GeneratedText& done, std::exception_ptr error) {
    if (error) return state->completion.set_exception(error);
    if (state->timed_out) return state->completion.set_exception(std::make_exception_ptr(timeout()));
    if (state->shut_down) return state->completion.set_exception(std::make_exception_ptr(shutting_down()));
    rest_of_reply(*state, done);
    const std::string& text = state->stop.sent();
    Json reply = header_json(header, "chat.completion");
    reply["choices"] = Json::array({{{"index", 0}, {"message", {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}}},
                                     {"logprobs", nullptr}, {"finish_reason", finish_reason(done, state->stop)}}});
    reply["usage"] = usage_json(done);
    reply["probes"] = std::move(state->probes);
    if (!state->steering.is_null()) reply["steering"] = state->steering;
    if (monitored) reply["monitor_firings"] = monitor::firings_json(done.firings);
    state->completion.set_value(std::move(reply));
  };
  request.abandoned = [state] { return state->abandoned.load(); };
  std::future<Json> completion = state->completion.get_future();
  context.scheduler.submit_generation(std::move(request), deadline);
  // The callbacks end the reply at the deadline; a worker busy past it gets a second more. A client that hangs up
  // frees the stream's slot at its next token (regression: a reply nobody waited for ran to its end).
  return await_reply(completion, deadline + std::chrono::seconds(1), [&state] { state->abandoned = true; }, timeout());
}

namespace {

// A RequestError's status (the deadline, the server stopping), else 500.
int status_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const RequestError& e) {
    return e.status();
  } catch (...) {
    return 500;
  }
}

Json chunk_json(const ReplyHeader& header, Json delta, const char* reason, bool with_usage) {
  Json chunk = header_json(header, "chat.completion.chunk");
  chunk["choices"] = Json::array({{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr},
                                   {"finish_reason", reason == nullptr ? Json() : Json(reason)}}});
  if (with_usage) chunk["usage"] = nullptr;
  return chunk;
}

// The stream's end: the text held back, the chunk with the finish reason, the usage, [DONE]; or the error.
void end_stream(EventStream& stream, const ReplyHeader& header, ReplyState& state, bool include_usage, bool monitored,
                const inference::GeneratedText& done, std::exception_ptr error) {
  if (!error && state.timed_out) error = std::make_exception_ptr(timeout());
  if (!error && state.shut_down) error = std::make_exception_ptr(shutting_down());
  if (error) return stream.push_data({dump_json(openai_error_body(status_of(error), message_of(error), "")), "[DONE]"}, true);
  const std::string rest = rest_of_reply(state, done);
  if (!rest.empty()) stream.push_data(dump_json(chunk_json(header, {{"content", rest}}, nullptr, include_usage)));
  Json last = chunk_json(header, Json::object(), finish_reason(done, state.stop), include_usage);
  if (!state.steering.is_null()) last["steering"] = state.steering;
  if (monitored) last["monitor_firings"] = monitor::firings_json(done.firings);
  stream.push_data(dump_json(last));
  if (include_usage) {
    Json usage = header_json(header, "chat.completion.chunk");
    usage["choices"] = Json::array();
    usage["usage"] = usage_json(done);
    stream.push_data(dump_json(usage));
  }
  stream.push_data("[DONE]", true);
}

}  // namespace

void start_chat_stream(const ServerContext& context, const ChatModel& model, const ChatQuery& query,
                       std::shared_ptr<EventStream> stream, Clock::time_point deadline) {
  inference::StreamRequest request = prepare(context, model, query, deadline);
  const ReplyHeader header{completion_id(), static_cast<int64_t>(std::time(nullptr)), model.name};
  auto state = std::make_shared<ReplyState>(query.stop);
  if (request.steering) state->steering = request.steering->record();
  const ViewQuery view = query.probes;
  const bool usage = query.include_usage;
  request.on_token = [context, view, state, stream, header, usage, deadline](const inference::ScoredToken& token) {
    state->shut_down = context.scheduler.stopping();
    if (stream->cancelled() || state->shut_down) return false;
    Json chunk = chunk_json(header, {{"content", add_piece(*state, token.text)}}, nullptr, usage);
    chunk["probes"] = token_predictions(context, view, token);
    add_firings_and_latents(chunk, token);
    stream->push_data(dump_json(chunk));
    state->timed_out = Clock::now() >= deadline;
    return !state->stop.stopped() && !state->timed_out;
  };
  request.on_end = [stream, header, state, usage, monitored = request.monitors != nullptr](
                       const inference::GeneratedText& done, std::exception_ptr error) {
    end_stream(*stream, header, *state, usage, monitored, done, error);
  };
  request.abandoned = [stream] { return stream->cancelled(); };
  stream->push_data(dump_json(chunk_json(header, {{"role", "assistant"}, {"content", ""}}, nullptr, usage)));
  context.scheduler.submit_generation(std::move(request), deadline);
}

}  // namespace probekit::server
