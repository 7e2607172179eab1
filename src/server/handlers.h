// What each JSON endpoint answers, apart from HTTP: a parsed query in, the response body out, RequestError for
// what the server refuses. The numbers come from the engine through the scheduler; the layout is
// multi_probe_inference --json's (ranking_json, per_token_json).
#pragma once

#include <string>
#include <vector>

#include "common/json.h"
#include "inference/engine.h"
#include "inference/ranking.h"
#include "server/options.h"
#include "server/api/requests.h"
#include "server/scheduler.h"

namespace probekit::server {

/// What a handler works with.
struct ServerContext {
  const inference::Engine& engine;
  Scheduler& scheduler;
  const ServerOptions& options;
};

/// The table of one text's probabilities that a query asks to see: its layers only (all loaded ones by default),
/// with its threshold or the probes' calibrated ones. Throws RequestError naming a layer that is not loaded.
inference::ScoreTable query_table(const ServerContext& context, const std::vector<std::vector<double>>& probability,
                                  const ViewQuery& view);

/// Refuses a view the probes cannot give: a layer without probes, calibrated thresholds of a multiclass probe. The
/// error's field is the view's own ("layers[0]") after `field_prefix` (where the request nests it: "probes.").
void check_view(const ServerContext& context, const ViewQuery& view, const std::string& field_prefix = "");

/// Refuses the text in `field` (400 naming it) where the probes were trained on conversations, which read a chat's
/// masked tokens (Engine::require_texts).
void require_texts(const ServerContext& context, const std::string& field);

/// A request's "steer" and "ablate" resolved against the model and the server's probes (null when it has none); a
/// label without a probe at the layer, a layer out of range, a vector of the wrong width is a 400 naming the item.
std::shared_ptr<const steering::SteeringVectors> resolve_steering(const ServerContext& context,
                                                                  const SteeringQuery& query);

/// A request's "monitors" read and resolved against the server's probes (null when it has none); a 400 naming the
/// policy's field for anything they cannot run.
std::shared_ptr<const monitor::MonitorSet> resolve_monitors(const ServerContext& context, const Json& monitors);

/// Refuses a text longer than --max-tokens, naming `field`.
void check_text_length(const ServerContext& context, const std::string& text, const std::string& field);
/// The same bound on a count of tokens already made (a prompt with its special tokens).
void check_token_count(const ServerContext& context, size_t tokens, const std::string& field);

/// POST /v1/rank: {"results": [one ranking per text, as multi_probe_inference --json shows it]}.
Json rank_response(const ServerContext& context, const RankQuery& query, Clock::time_point deadline);

/// POST /v1/per-token: multi_probe_inference --per-token --json's object for the text.
Json per_token_response(const ServerContext& context, const PerTokenQuery& query, Clock::time_point deadline);

/// GET /v1/info: the model, device, layers, labels, the bounds and what the worker has done.
Json info_response(const ServerContext& context, int64_t open_streams, bool generation);

}  // namespace probekit::server
