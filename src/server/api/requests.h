// The JSON bodies of probe_server's requests, read into plain structs: a malformed body, a field of the wrong
// type or out of range, an unknown field or a value past a bound is a RequestError naming the field, the HTTP
// status and the bound's flag. Nothing here touches the model, so the parser is fuzzed on its own.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "chat/conversation.h"
#include "common/json.h"
#include "server/api/limits.h"

namespace probekit::server {

/// A request the server refuses: the HTTP status (4xx), the message and the field it is about ("" for the body).
class RequestError : public std::invalid_argument {
 public:
  RequestError(int status, const std::string& message, std::string field = "")
      : std::invalid_argument(message), status_(status), field_(std::move(field)) {}
  int status() const { return status_; }
  const std::string& field() const { return field_; }

 private:
  int status_;
  std::string field_;
};

/// How results are shown, as multi_probe_inference's flags of the same names.
struct ViewQuery {
  int64_t top_k = 5;
  double threshold = 0.1;
  bool calibrated = false;
  std::vector<int64_t> layers;  // a subset of the loaded layers; empty: all of them
  std::string mode = "all";     // several layers: all | by-action | by-layer
  std::string aggregate = "max";
};

/// One steering item of a request: a label's probe direction or a vector, added at a layer's output times a
/// coefficient ("steer"), or projected out of it ("ablate", no coefficient).
struct SteerItem {
  std::string label;          // empty: `vector` is the direction
  std::vector<float> vector;
  int64_t layer = 0;
  double coefficient = 1;     // with `sae` and `clamp`: the value the latent is set to
  std::string sae;            // an SAE latent ({"sae", "latent", "coefficient" | "clamp"}): the SAE's name (--sae)
  int64_t latent = -1;
  bool clamp = false;
};

/// "steer": [{"label", "layer", "coefficient"} | {"vector": [...], "layer", "coefficient"} |
/// {"sae", "latent", "coefficient" | "clamp"}] and
/// "ablate": [{"label", "layer"} | {"vector": [...], "layer"}], at most kMaxSteeringItems items in all.
struct SteeringQuery {
  std::vector<SteerItem> steer, ablate;
  bool empty() const { return steer.empty() && ablate.empty(); }
};
constexpr int64_t kMaxSteeringItems = 32;
constexpr int64_t kMaxSteeringVector = 1 << 16;  // values of one vector

/// POST /v1/rank: {"texts": [...] or "messages": [...] (one conversation) with its "tools", "top_k", "threshold",
/// "calibrated", "layers", "mode", "aggregate", "steer", "ablate"}.
struct RankQuery {
  std::vector<std::string> texts;
  chat::Conversation conversation;  // checked messages and tools, in place of texts; messages null: texts
  ViewQuery view;
  SteeringQuery steering;
};

/// POST /v1/per-token: {"text": "..." or "messages": [...] (one conversation) with its "tools", "threshold",
/// "calibrated", "layers"}.
struct PerTokenQuery {
  std::string text;
  chat::Conversation conversation;  // checked messages and tools, in place of the text; messages null: the text
  ViewQuery view;
  SteeringQuery steering;
};

/// POST /v1/generate: {"prompt": "...", "max_new_tokens", "temperature", "sample_top_k", "top_p", "seed",
/// "stop", the view's "top_k", "threshold", "calibrated", "layers", "steer", "ablate" and "monitors"}.
struct GenerateQuery {
  std::string prompt;
  int64_t max_new_tokens = 64;
  double temperature = 0;  // 0: greedy
  int64_t sample_top_k = 0;  // 0: no top-k cut
  double top_p = 1;
  uint64_t seed = 0;
  bool stop = true;  // stop at the model's end-of-sequence tokens
  ViewQuery view;
  SteeringQuery steering;
  Json monitors;  // "monitors": policies as given (monitor::parse_policies reads them); null: none
};

RankQuery parse_rank_query(std::string_view body, const Limits& limits);
PerTokenQuery parse_per_token_query(std::string_view body, const Limits& limits);
GenerateQuery parse_generate_query(std::string_view body, const Limits& limits);

/// The body of an error response: {"error": message, "field": field} (field left out when empty).
Json error_body(const std::string& message, const std::string& field);

}  // namespace probekit::server
