#include "server/handlers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "chat/chat_template.h"
#include "chat/conversation.h"
#include "device/device_select.h"
#include "inference/session.h"
#include "monitor/policy.h"

namespace probekit::server {

namespace {

inference::Display display_of(const ViewQuery& view) {
  return inference::json_display(view.top_k, view.threshold, view.calibrated, view.mode, view.aggregate);
}

// The rows of the loaded layers a query names, in the order they are loaded.
std::vector<size_t> layer_rows(const inference::Engine& engine, const std::vector<int64_t>& asked,
                               const std::string& field_prefix = "") {
  const std::vector<int64_t>& loaded = engine.layers();
  std::vector<size_t> rows;
  for (size_t i = 0; i < asked.size(); ++i) {
    auto found = std::find(loaded.begin(), loaded.end(), asked[i]);
    if (found == loaded.end()) {
      std::string field = fmt::format("{}layers[{}]", field_prefix, i);
      throw RequestError(400, fmt::format("'{}': layer {} has no probes loaded (loaded layers: {})", field, asked[i],
                                          fmt::join(loaded, ", ")),
                         field);
    }
    rows.push_back(static_cast<size_t>(found - loaded.begin()));
  }
  if (asked.empty()) {
    for (size_t l = 0; l < loaded.size(); ++l) rows.push_back(l);
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

// One layer, or each label at its best layer: multi_probe_inference's single-layer layout.
bool single_layer(const ServerContext& context, const ViewQuery& view) {
  return context.options.engine.best_layer || layer_rows(context.engine, view.layers).size() == 1;
}

// One steering item as a spec (its probes: the server's), checked against the model first so that the error names
// the item's field.
steering::SteeringSpec item_spec(const ServerContext& context, const SteerItem& item, const std::string& field,
                                 bool ablate) {
  steering::SteeringSpec spec;
  spec.ops.push_back(monitor::steer_op(item, ablate));
  if (!item.sae.empty()) {
    for (const sae::SparseAutoencoder& sae : context.engine.saes()) {
      if (sae.name == item.sae && (item.latent < 0 || item.latent >= sae.d_sae)) {
        throw RequestError(400, fmt::format("'{}.latent' is {}: SAE '{}' has latents 0 to {}", field, item.latent,
                                            sae.name, sae.d_sae - 1),
                           field + ".latent");
      }
    }
    return spec;
  }
  const model::ModelConfig& config = context.engine.model().config();
  if (item.layer >= config.num_layers) {
    throw RequestError(400, fmt::format("'{}.layer': layer {} is out of range: the model has layers 0 to {}", field,
                                        item.layer, config.num_layers - 1),
                       field + ".layer");
  }
  if (item.label.empty() && static_cast<int64_t>(item.vector.size()) != config.hidden_size) {
    throw RequestError(400, fmt::format("'{}.vector' has {} values, the model's hidden size is {}", field,
                                        item.vector.size(), config.hidden_size),
                       field + ".vector");
  }
  spec.probes_dir = context.options.engine.probes_dir;
  return spec;
}

}  // namespace

std::shared_ptr<const steering::SteeringVectors> resolve_steering(const ServerContext& context,
                                                                  const SteeringQuery& query) {
  if (query.empty()) return nullptr;
  auto vectors = std::make_shared<steering::SteeringVectors>();
  for (const bool ablate : {false, true}) {
    const std::vector<SteerItem>& items = ablate ? query.ablate : query.steer;
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string field = fmt::format("{}[{}]", ablate ? "ablate" : "steer", i);
      steering::SteeringVectors item;
      try {
        item = steering::resolve(item_spec(context, items[i], field, ablate), context.engine.model().config(),
                                 context.engine.saes());
      } catch (const RequestError&) {
        throw;
      } catch (const std::exception& e) {
        const std::string part = !items[i].sae.empty() ? ".sae" : items[i].label.empty() ? ".vector" : ".label";
        throw RequestError(400, fmt::format("'{}': {}", field, e.what()), field + part);
      }
      vectors->additions.insert(vectors->additions.end(), item.additions.begin(), item.additions.end());
      vectors->ablations.insert(vectors->ablations.end(), item.ablations.begin(), item.ablations.end());
      for (const steering::SteeringVectors::Clamp& clamp : item.clamps) {
        if (vectors->clamps_latent(clamp.sae->name, clamp.latent)) {
          throw RequestError(400, fmt::format("'{}': latent {} of SAE '{}' is clamped by an earlier item too; a clamp "
                                              "sets its value once",
                                              field, clamp.latent, clamp.sae->name),
                             field + ".latent");
        }
        vectors->clamps.push_back(clamp);
      }
    }
  }
  return vectors;
}

std::shared_ptr<const monitor::MonitorSet> resolve_monitors(const ServerContext& context, const Json& monitors) {
  if (monitors.is_null()) return nullptr;
  std::vector<monitor::MonitorPolicy> policies = monitor::parse_policies(monitors);
  if (policies.empty()) return nullptr;
  try {
    return context.engine.resolve_monitors(policies);
  } catch (const monitor::PolicyError& e) {
    throw RequestError(400, e.what(), e.field());
  }
}

inference::ScoreTable query_table(const ServerContext& context, const std::vector<std::vector<double>>& probability,
                                  const ViewQuery& view) {
  inference::ScoreTable all = inference::table_of(context.engine, probability, display_of(view));
  inference::ScoreTable table{{}, all.labels, {}, {}, {}, all.threshold_source};
  for (size_t l : layer_rows(context.engine, view.layers)) {
    table.layers.push_back(all.layers[l]);
    table.probability.push_back(all.probability[l]);
    table.threshold.push_back(all.threshold[l]);
    table.auc.push_back(all.auc[l]);
  }
  return table;
}

void require_texts(const ServerContext& context, const std::string& field) {
  try {
    context.engine.require_texts();
  } catch (const UsageError& e) {
    throw RequestError(400, e.what(), field);
  }
}

void check_view(const ServerContext& context, const ViewQuery& view, const std::string& field_prefix) {
  if (view.calibrated && context.engine.multiclass()) {
    throw RequestError(400,
                       fmt::format("'{}calibrated': the probes are a multiclass probe (train_probes), whose classes have "
                                   "no thresholds of their own; use '{}threshold'",
                                   field_prefix, field_prefix),
                       field_prefix + "calibrated");
  }
  layer_rows(context.engine, view.layers, field_prefix);
}

void check_text_length(const ServerContext& context, const std::string& text, const std::string& field) {
  // Every token covers at least one byte, so a text of no more bytes than the bound is within it untokenized.
  auto limit = static_cast<size_t>(context.options.limits.max_tokens);
  if (text.size() <= limit) return;
  check_token_count(context, context.engine.tokenizer().encode(text, false).size(), field);
}

void check_token_count(const ServerContext& context, size_t tokens, const std::string& field) {
  auto limit = static_cast<size_t>(context.options.limits.max_tokens);
  if (tokens > limit) {
    throw RequestError(413,
                       fmt::format("'{}' is {} tokens long, more than this server's limit of {} tokens per text (--max-tokens)",
                                   field, tokens, limit),
                       field);
  }
}

namespace {

// A conversation's contents as one text (what its tokens are counted by against --max-tokens; the template's few
// tokens aside), with the tools it offers, which the template prints with tojson.
std::string conversation_contents(const chat::Conversation& conversation) {
  std::string text = conversation.tools.is_null() ? "" : conversation.tools.dump() + "\n";
  for (const OrderedJson& message : conversation.messages) {
    const OrderedJson content = message.value("content", OrderedJson());
    if (content.is_string()) text += content.get<std::string>() + "\n";
    // What the template prints with tojson: a tool's result given as an object, the calls an assistant turn makes.
    if (content.is_object()) text += content.dump() + "\n";
    if (message.contains("tool_calls")) text += message.at("tool_calls").dump() + "\n";
    if (!content.is_array()) continue;
    for (const OrderedJson& part : content) {
      if (part.is_object() && part.contains("text") && part.at("text").is_string()) {
        text += part.at("text").get<std::string>() + "\n";
      }
    }
  }
  return text;
}

// A conversation's scoring on the worker: what the engine refuses of it, naming it 'messages' (the template's error,
// a mask the probes cannot place), is a 400 on that field, as in chat completions (regression: it named none).
template <typename Result>
Result score_messages(const ServerContext& context, std::function<Result(const std::function<void()>&)> work,
                      Clock::time_point deadline) {
  try {
    return context.scheduler.run_alone<Result>(std::move(work), deadline);
  } catch (const RequestError&) {
    throw;
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    if (what.find("'messages'") == std::string::npos) throw;
    // Tools a template never reads are the tools field's problem, as chat completions names it.
    throw RequestError(400, what, what.find(chat::kToolsNeverRead) != std::string::npos ? "tools" : "messages");
  }
}

}  // namespace

Json rank_response(const ServerContext& context, const RankQuery& query, Clock::time_point deadline) {
  check_view(context, query.view);
  for (size_t i = 0; i < query.texts.size(); ++i) check_text_length(context, query.texts[i], fmt::format("texts[{}]", i));
  const bool conversation = !query.conversation.messages.is_null();
  if (!conversation) require_texts(context, "texts");
  // Regression: a conversation's length went unchecked here, as /v1/per-token checks it.
  if (conversation) check_text_length(context, conversation_contents(query.conversation), "messages");
  std::shared_ptr<const steering::SteeringVectors> steering = resolve_steering(context, query.steering);
  const inference::Engine& engine = context.engine;
  if (conversation && steering) throw RequestError(400, "steering applies to 'texts', not to 'messages'", "steer");
  const std::string scored = conversation ? chat::conversation_text(query.conversation) : "";
  std::vector<inference::TextScores> scores =
      conversation ? score_messages<std::vector<inference::TextScores>>(
                         context,
                         [&engine, scored](const std::function<void()>&) {
                           return engine.score_conversations({scored}, [](size_t) { return "'messages'"; });
                         },
                         deadline)
                   : context.scheduler.score(query.texts, steering, deadline);
  inference::Display display = display_of(query.view);
  bool one_layer = single_layer(context, query.view);
  Json results = Json::array();
  for (size_t i = 0; i < scores.size(); ++i) {
    results.push_back(inference::ranking_json(query_table(context, scores[i].probability, query.view),
                                              conversation ? std::string("conversation") : query.texts[i],
                                              scores[i].cut, display, one_layer, engine.multiclass()));
  }
  Json response = {{"results", results}};
  if (steering) response["steering"] = steering->record();
  return response;
}


Json per_token_response(const ServerContext& context, const PerTokenQuery& query, Clock::time_point deadline) {
  check_view(context, query.view);
  const bool conversation = !query.conversation.messages.is_null();
  if (!conversation) require_texts(context, "text");
  if (!conversation) check_text_length(context, query.text, "text");
  if (conversation) check_text_length(context, conversation_contents(query.conversation), "messages");
  const inference::Engine& engine = context.engine;
  std::string text = conversation ? chat::conversation_text(query.conversation) : query.text;
  std::shared_ptr<const steering::SteeringVectors> steering = resolve_steering(context, query.steering);
  if (conversation && steering) throw RequestError(400, "steering applies to 'text', not to 'messages'", "steer");
  // A request that stopped waiting (408, 499) or a server that is stopping ends its scoring at the next pass: a long
  // text's prefixes otherwise kept the device from everyone for their whole time (regression: a client that hung up
  // did not end it).
  auto work = [&engine, text, steering, conversation](const std::function<void()>& before_pass) {
    return conversation ? engine.score_conversation_tokens(text, "'messages'", before_pass)
                        : engine.score_tokens(text, steering.get(), before_pass);
  };
  inference::TokenScores scores = conversation ? score_messages<inference::TokenScores>(context, work, deadline)
                                               : context.scheduler.run_alone<inference::TokenScores>(work, deadline);
  std::vector<inference::ScoreTable> tables;
  for (const auto& probability : scores.probability) tables.push_back(query_table(context, probability, query.view));
  Json response = inference::per_token_json(conversation ? "conversation" : query.text, scores, tables);
  if (steering) response["steering"] = steering->record();
  return response;
}

Json info_response(const ServerContext& context, int64_t open_streams, bool generation) {
  const inference::Engine& engine = context.engine;
  const Limits& l = context.options.limits;
  SchedulerStats stats = context.scheduler.stats();
  std::string model = context.options.engine.model_dir.empty() ? engine.model_dir() : context.options.engine.model_dir;
  return {{"model", model},
          {"model_dir", engine.model_dir()},
          {"probes_dir", context.options.engine.probes_dir},
          {"device", engine.target().device.str()},
          {"dtype", device::dtype_name(engine.target().dtype_choice.dtype)},
          {"layers", engine.layers()},
          {"labels", engine.labels()},
          {"multiclass", engine.multiclass()},
          {"best_layer", context.options.engine.best_layer},
          {"readout", engine.recipe().to_json()},
          {"generation", generation},
          // Every bound a client may meet, each named as its flag (regression: the connection's were left out).
          {"limits", {{"max_body_bytes", l.max_body_bytes}, {"max_texts", l.max_texts}, {"max_tokens", l.max_tokens},
                      {"max_new_tokens", l.max_new_tokens}, {"max_streams", l.max_streams},
                      {"max_queued_texts", l.max_queued_texts}, {"request_timeout_s", l.request_timeout_s},
                      {"client_timeout_s", context.options.client_timeout_s},
                      {"max_connections", context.options.max_connections},
                      {"http_threads", context.options.http_threads}}},
          {"stats", {{"cycles", stats.cycles}, {"texts_scored", stats.texts_scored},
                     {"batched_requests", stats.batched_requests}, {"exclusive_jobs", stats.exclusive_jobs},
                     {"streams_joined", stats.streams_joined}, {"joins", stats.joins},
                     {"decode_steps", stats.decode_steps},
                     {"largest_batch", stats.largest_batch},
                     {"open_streams", open_streams}}}};
}

}  // namespace probekit::server
