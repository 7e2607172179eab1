// POST /v1/chat/completions' body, as the OpenAI API reference gives it (messages, tools with tool_choice "auto",
// max_tokens or max_completion_tokens, temperature, top_p, seed, stop, stream, stream_options.include_usage, n = 1), with our
// extensions: "probes" (how the probe scores riding on each token are shown) and "steer" / "ablate" as in
// /v1/generate. Refusals are RequestErrors naming the field, as for our own endpoints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "server/api/limits.h"
#include "server/api/requests.h"

namespace probekit::server {

constexpr int64_t kMaxStopStrings = 4;  // as OpenAI allows

struct ChatQuery {
  std::string model;      // any name: the loaded model answers
  // Both keep their objects' keys in the order sent, which the template's tojson prints.
  OrderedJson messages;   // checked: a non-empty list of {"role", "content"} messages
  OrderedJson tools;      // checked: functions offered to the template (apply_chat_template(tools=...)); null: none
  int64_t max_tokens = 0;  // max_completion_tokens or max_tokens; 0: up to --max-new-tokens
  double temperature = 1;  // OpenAI's default
  double top_p = 1;
  std::optional<uint64_t> seed;  // none: a fresh one per request
  std::vector<std::string> stop;  // the reply ends before the first of these
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
  ViewQuery probes;           // "probes": {"top_k", "threshold", "calibrated", "layers"}
  SteeringQuery steering;
  Json monitors;              // "monitors": policies as given (monitor::parse_policies); null: none
};

ChatQuery parse_chat_query(std::string_view body, const Limits& limits);

/// The body of an error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}; `type` is
/// invalid_request_error for a 4xx, server_error otherwise.
Json openai_error_body(int status, const std::string& message, const std::string& field);

}  // namespace probekit::server
