// Steering through probe_server: "steer" and "ablate" in /v1/rank, /v1/per-token and /v1/generate give what the
// engine gives with the same steering; requests that steer differently, queued together, share one batch (a vector
// per row) and each gets what it gets alone, SAE latents added and clamped too; bad items are 400s naming their field;
// a chat completion records its steering, streamed or not.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <httplib.h>

#include <cmath>
#include <optional>
#include <thread>

#include "common/json.h"
#include "server_runs.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

// The same numbers within 1e-5 (rows batched with others are padded to another length).
void check_close(const Json& got, const Json& expected, const std::string& where) {
  if (expected.is_number_float()) {
    CHECK_MESSAGE(std::fabs(got.get<double>() - expected.get<double>()) < 1e-5, where, ": ", got, " vs ", expected);
  } else if (expected.is_structured()) {
    REQUIRE_MESSAGE(got.size() == expected.size(), where);
    for (auto it = expected.begin(); it != expected.end(); ++it) {
      const std::string key = expected.is_object() ? it.key() : std::to_string(std::distance(expected.begin(), it));
      check_close(expected.is_object() ? got.at(it.key()) : got.at(std::stoul(key)), *it, where + "/" + key);
    }
  } else {
    CHECK_MESSAGE(got == expected, where, ": ", got.dump(), " vs ", expected.dump());
  }
}

Json rank(const std::string& text, const Json& steer) {
  Json body = {{"texts", {text}}, {"top_k", 3}};
  if (!steer.is_null()) body["steer"] = steer;
  return body;
}

}  // namespace

TEST_CASE("probe_server: requests that steer differently, queued together, share a batch and get what they get alone") {
  TempDir tmp;
  RunningServer s(options_for(train_probes(tmp)));
  const std::string text = "I examined each part of the problem step by step.";
  std::vector<float> vector(64);
  for (size_t i = 0; i < 64; ++i) vector[i] = std::cos(0.3f * static_cast<float>(i));
  const std::vector<Json> steers = {Json(), Json::array({{{"label", "reframing"}, {"layer", 2}, {"coefficient", 6}}}),
                                    Json::array({{{"label", "reframing"}, {"layer", 2}, {"coefficient", -6}}}),
                                    Json::array({{{"vector", vector}, {"layer", 1}, {"coefficient", 2.5}},
                                                 {{"label", "noticing"}, {"layer", 5}, {"coefficient", 3}}})};
  std::vector<Json> alone;
  for (const Json& steer : steers) alone.push_back(post_json(s, "/v1/rank", rank(text, steer)));
  CHECK(alone[1]["results"][0] != alone[0]["results"][0]);
  CHECK(alone[1]["steering"]["add"][0]["source"]["label"] == "reframing");
  CHECK_FALSE(alone[0].contains("steering"));

  std::vector<std::optional<httplib::Result>> together(steers.size());
  const server::SchedulerStats before = s.server().scheduler().stats();
  {
    std::shared_ptr<void> hold = s.server().scheduler().hold();
    std::vector<std::thread> clients;
    for (size_t i = 0; i < steers.size(); ++i) {
      clients.emplace_back([&, i] { together[i].emplace(post(s, "/v1/rank", rank(text, steers[i]).dump())); });
    }
    while (s.server().scheduler().queued_texts() < static_cast<int64_t>(steers.size())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    hold.reset();
    for (std::thread& client : clients) client.join();
  }
  CHECK(s.server().scheduler().stats().cycles - before.cycles == 1);
  for (size_t i = 0; i < steers.size(); ++i) {
    REQUIRE((together[i] && *together[i]));
    REQUIRE_MESSAGE((*together[i])->status == 200, (*together[i])->body);
    check_close(Json::parse((*together[i])->body), alone[i], fmt::format("request {}", i));
  }

  const Json per_token = post_json(s, "/v1/per-token", {{"text", text}, {"steer", steers[1]}});
  CHECK(per_token["steering"]["add"][0]["coefficient"] == 6);
  const Json plain_tokens = post_json(s, "/v1/per-token", {{"text", text}});
  CHECK(per_token["tokens"] != plain_tokens["tokens"]);
}

TEST_CASE("probe_server: steering items are checked, 400 naming the item's field") {
  TempDir tmp;
  RunningServer s(options_for(train_probes(tmp)));
  const std::string path = "/v1/rank";
  auto body = [](const Json& steer, const char* key = "steer") { return Json({{"texts", {"Day 3."}}, {key, steer}}).dump(); };
  check_refused(s, path, body(Json::array({{{"label", "nosuch"}, {"layer", 2}, {"coefficient", 1}}})), 400,
                {"has no probe for the label 'nosuch'"}, "steer[0].label");
  check_refused(s, path, body(Json::array({{{"label", "reframing"}, {"layer", 3}, {"coefficient", 1}}})), 400,
                {"has no probes for layer 3"}, "steer[0].label");
  check_refused(s, path, body(Json::array({{{"label", "reframing"}, {"layer", 9}, {"coefficient", 1}}})), 400,
                {"layer 9 is out of range: the model has layers 0 to 5"}, "steer[0].layer");
  check_refused(s, path, body(Json::array({{{"vector", {1, 2, 3}}, {"layer", 2}, {"coefficient", 1}}})), 400,
                {"has 3 values, the model's hidden size is 64"}, "steer[0].vector");
  check_refused(s, path, body(Json::array({{{"label", "reframing"}, {"vector", {1}}, {"layer", 2}, {"coefficient", 1}}})),
                400, {"needs a 'label' or a 'vector' (one of them)"}, "steer[0]");
  check_refused(s, path, body(Json::array({{{"label", "reframing"}, {"layer", 2}}})), 400,
                {"'steer[0].coefficient' must be a number"}, "steer[0].coefficient");
  check_refused(s, path, body(Json::array({{{"label", "reframing"}, {"layer", 2}, {"coefficient", 1}}}), "ablate"), 400,
                {"unknown field 'ablate[0].coefficient'"}, "ablate[0].coefficient");
  Json many = Json::array();
  for (int i = 0; i < 33; ++i) many.push_back({{"label", "reframing"}, {"layer", 2}, {"coefficient", 1}});
  check_refused(s, path, body(many), 413, {"hold more than 32 items"}, "steer");
  // Finite values whose norm is not (in fp32): regression, every token generated was id 0 and the record's norm null.
  check_refused(s, path, body(Json::array({{{"vector", std::vector<double>(64, 1e30)}, {"layer", 2}, {"coefficient", 1}}})),
                400, {"the vector's norm is 8e+30, past 1e+12, where the residual stream cannot stay finite"}, "steer[0].vector");
  const Json ablated = post_json(s, path, Json::parse(body(Json::array({{{"label", "reframing"}, {"layer", 2}}}), "ablate")));
  CHECK(ablated["steering"]["ablate"][0]["layer"] == 2);
}

TEST_CASE("probe_server: SAE latent items steer and clamp; batched with other steering each gets what it gets alone") {
  TempDir tmp;
  server::ServerOptions options = options_for(train_probes(tmp));
  options.engine.saes = {{"jr", std::string(PROBEKIT_FIXTURES) + "/saes/saelens_jumprelu"}};
  RunningServer s(options);
  const std::string path = "/v1/rank";
  auto body = [](const Json& steer) { return Json({{"texts", {"Day 3."}}, {"steer", steer}}).dump(); };
  check_refused(s, path, body(Json::array({{{"sae", "nosuch"}, {"latent", 1}, {"coefficient", 1}}})), 400,
                {"no SAE named 'nosuch' (loaded: jr)"}, "steer[0].sae");
  // Regression: named steer[0].sae and worded as --clamp-latent, a flag no request has.
  check_refused(s, path, body(Json::array({{{"sae", "jr"}, {"latent", 256}, {"clamp", 1}}})), 400,
                {"'steer[0].latent' is 256: SAE 'jr' has latents 0 to 255"}, "steer[0].latent");
  check_refused(s, path,
                body(Json::array({{{"sae", "jr"}, {"latent", 5}, {"clamp", 1}}, {{"sae", "jr"}, {"latent", 5}, {"clamp", 2}}})),
                400, {"'steer[1]': latent 5 of SAE 'jr' is clamped by an earlier item too"}, "steer[1].latent");
  check_refused(s, path, body(Json::array({{{"sae", "jr"}, {"latent", 1}, {"coefficient", 1}, {"clamp", 2}}})), 400,
                {"needs a 'coefficient' or a 'clamp' (one of them)"}, "steer[0]");
  check_refused(s, path, body(Json::array({{{"sae", "jr"}, {"latent", -1}, {"clamp", 2}}})), 400,
                {"'steer[0].latent' must be a latent index"}, "steer[0].latent");

  const std::string text = "I examined each part of the problem step by step.";
  const std::vector<Json> steers = {Json(), Json::array({{{"sae", "jr"}, {"latent", 5}, {"clamp", 9}}}),
                                    Json::array({{{"sae", "jr"}, {"latent", 7}, {"coefficient", -4}},
                                                 {{"label", "reframing"}, {"layer", 2}, {"coefficient", 3}}})};
  std::vector<Json> alone;
  for (const Json& steer : steers) alone.push_back(post_json(s, path, rank(text, steer)));
  CHECK(alone[1]["results"][0] != alone[0]["results"][0]);
  CHECK(alone[1]["steering"]["clamp"][0]["source"]["latent"] == 5);
  CHECK(alone[2]["steering"]["add"][0]["source"]["sae"] == "jr");
  std::vector<std::optional<httplib::Result>> together(steers.size());
  {
    std::shared_ptr<void> hold = s.server().scheduler().hold();
    std::vector<std::thread> clients;
    for (size_t i = 0; i < steers.size(); ++i) {
      clients.emplace_back([&, i] { together[i].emplace(post(s, path, rank(text, steers[i]).dump())); });
    }
    while (s.server().scheduler().queued_texts() < static_cast<int64_t>(steers.size())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    hold.reset();
    for (std::thread& client : clients) client.join();
  }
  for (size_t i = 0; i < steers.size(); ++i) {
    REQUIRE((together[i] && *together[i]));
    REQUIRE_MESSAGE((*together[i])->status == 200, (*together[i])->body);
    check_close(Json::parse((*together[i])->body), alone[i], fmt::format("request {}", i));
  }
}

TEST_CASE("probe_server: a steered chat completion records its steering, streamed or not") {
  TempDir tmp;
  RunningServer s(options_for(train_probes(tmp)));
  Json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 3}, {"temperature", 0},
               {"steer", Json::array({{{"label", "reframing"}, {"layer", 2}, {"coefficient", 4}}})}};
  const Json completion = post_json(s, "/v1/chat/completions", body);
  REQUIRE(completion["steering"].is_object());
  CHECK(completion["steering"]["add"][0]["coefficient"] == 4);
  body["stream"] = true;
  httplib::Result r = post(s, "/v1/chat/completions", body.dump());
  REQUIRE(r);
  REQUIRE_MESSAGE(r->status == 200, r->body);
  // The chunk with the finish reason carries it (regression: only a completion did).
  Json finished;
  for (size_t at = r->body.find("data: {"); at != std::string::npos; at = r->body.find("data: {", at + 1)) {
    const Json chunk = Json::parse(r->body.substr(at + 6, r->body.find("\n\n", at) - at - 6));
    if (!chunk["choices"].empty() && !chunk["choices"][0]["finish_reason"].is_null()) finished = chunk;
  }
  REQUIRE(finished.is_object());
  CHECK(finished["steering"] == completion["steering"]);
}

TEST_CASE("probe_server /v1/generate: a stream a monitor steered says so in its done event, as a steered request's does") {
  TempDir tmp;
  RunningServer s(options_for(train_probes(tmp)));
  auto done_of = [&](const Json& monitor) {
    const Json body = {{"prompt", "Once upon a time"}, {"max_new_tokens", 3}, {"stop", false},
                       {"monitors", Json::array({monitor})}};
    httplib::Result r = post(s, "/v1/generate", body.dump());
    REQUIRE(r);
    REQUIRE(r->status == 200);
    return parse_events(r->body).back().data;
  };
  const Json steer = Json::array({{{"label", "reframing"}, {"layer", 2}, {"coefficient", 4}}});
  const Json steered = done_of({{"label", "reframing"}, {"layer", 2}, {"threshold", 0}, {"action", "steer"}, {"steer", steer}});
  REQUIRE(steered["monitor_firings"].size() == 1);
  // Regression: the stream went on steered, and its end said nothing of it.
  CHECK(steered["steered"] == true);
  const Json flagged = done_of({{"label", "reframing"}, {"layer", 2}, {"threshold", 0}});
  REQUIRE(flagged["monitor_firings"].size() == 1);
  CHECK_FALSE(flagged.contains("steered"));
}
