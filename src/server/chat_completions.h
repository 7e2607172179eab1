// The OpenAI API's POST /v1/chat/completions and GET /v1/models over the engine: the messages rendered with the
// checkpoint's chat template (read once), the reply generated in the worker's decode batch like any stream, the
// probes' scores riding along ("probes": per token on a completion, on each token's chunk of a stream).
#pragma once

#include <ctime>
#include <memory>
#include <string>

#include "chat/chat_template.h"
#include "common/json.h"
#include "server/api/chat_request.h"
#include "server/generation_stream.h"
#include "server/handlers.h"

namespace probekit::server {

/// The model as the OpenAI endpoints present it.
struct ChatModel {
  std::string name;  // its id in /v1/models and in every response
  int64_t created = 0;  // when the server loaded it (Unix seconds)
  std::shared_ptr<const chat::ChatTemplate> chat_template;  // null: `problem` says why
  std::string problem;

  /// The chat template of `dir` (its absence is kept as the problem chat requests are answered with).
  static ChatModel load(const std::string& name, const std::string& dir);
};

/// GET /v1/models: {"object": "list", "data": [the loaded model]}.
Json models_response(const ChatModel& model);

/// GET /v1/models/{id}: the loaded model when `id` names it, else a 404 (RequestError).
Json model_response(const ChatModel& model, const std::string& id);

/// POST /v1/chat/completions without "stream": the completion once the reply has ended. `slot` (the request's
/// --max-streams slot) is held until the worker lets the reply go, past an answer by timeout too.
Json chat_completion_response(const ServerContext& context, const ChatModel& model, const ChatQuery& query,
                              Clock::time_point deadline, std::shared_ptr<void> slot);

/// POST /v1/chat/completions with "stream": queues the reply, whose chunks go onto `stream` ("data: {chunk}"), the
/// last one "data: [DONE]". Throws RequestError before anything is queued.
void start_chat_stream(const ServerContext& context, const ChatModel& model, const ChatQuery& query,
                       std::shared_ptr<EventStream> stream, Clock::time_point deadline);

}  // namespace probekit::server
