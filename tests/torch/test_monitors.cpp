// Monitors acting on generations (issue 48; their aggregates' formulas: test_monitor_kinds.cpp): policies read from
// requests and flags with errors naming the field, and on the fixture model with probes trained on it: a monitor fires at the
// first token whose aggregate passes its threshold (found from an unmonitored run's scores), flag leaves the tokens
// as they were, stop ends before the token that fired, steer changes the tokens after the next one only, a prompt
// policy stops before any token; streams with different policies in one batch give what each gives alone; the
// server's /v1/generate and /v1/chat/completions and multi_probe_inference --monitor say what fired.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "generation/flags.h"
#include "inference/reports.h"
#include "inference/session.h"
#include "inference/stream_batch.h"
#include "monitor/monitor_flags.h"
#include "monitor/policy.h"
#include "probe_fixture.h"
#include "probes/calibration.h"
#include "server_runs.h"

namespace probekit::testing {

namespace {

constexpr const char* kPrompt = "Once upon a time";
constexpr int64_t kTokens = 12;

monitor::MonitorPolicy policy(const std::string& action, double threshold, const std::string& aggregate = "token") {
  monitor::MonitorPolicy p;
  p.label = "reframing";
  p.layer = 2;
  p.threshold = threshold;
  p.action = action;
  p.aggregate = aggregate;
  if (action == "steer") {
    p.steering.push_back(steering::SteeringOp::probe(steering::SteeringAction::kAdd, "reframing", "2", 100));
  }
  return p;
}

generation::GenerationOptions greedy(const inference::Engine& engine, int64_t tokens = kTokens) {
  generation::GenerationFlags flags;
  flags.options.max_new_tokens = tokens;
  flags.no_stop = true;
  return generation::resolve_generation_flags(flags, engine.model_dir());
}

// The probes' score of label reframing at layer 2 for each token.
std::vector<double> reframing_scores(const inference::Engine& engine, const std::vector<inference::ScoredToken>& tokens) {
  const size_t l = static_cast<size_t>(std::find(engine.layers().begin(), engine.layers().end(), 2) - engine.layers().begin());
  const size_t k = static_cast<size_t>(std::find(engine.labels().begin(), engine.labels().end(), "reframing") - engine.labels().begin());
  std::vector<double> scores;
  for (const inference::ScoredToken& t : tokens) scores.push_back(t.probability[l][k]);
  return scores;
}

// A token k >= 1 whose score is above every one before it, and a threshold between: a token-aggregate monitor at that
// threshold fires at k. The last such token, so that the stream has gone some way.
std::pair<int64_t, double> firing_point(const std::vector<double>& scores) {
  std::optional<std::pair<int64_t, double>> found;
  double highest = scores.front();
  for (size_t i = 1; i < scores.size(); ++i) {
    if (scores[i] > highest + 1e-6) found = std::make_pair(static_cast<int64_t>(i), (scores[i] + highest) / 2);
    highest = std::max(highest, scores[i]);
  }
  REQUIRE_MESSAGE(found, "the scores never rise: ", fmt::format("{}", fmt::join(scores, ", ")));
  return *found;
}

struct Run {
  std::vector<int32_t> ids;
  generation::StopReason stop = generation::StopReason::kLength;
  std::vector<monitor::Firing> firings;
  std::vector<int64_t> tokens_with_firings;  // indexes of the tokens handed out with a firing
};

Run monitored(const inference::Engine& engine, const std::vector<monitor::MonitorPolicy>& policies,
              const std::string& prompt = kPrompt) {
  Run run;
  std::vector<inference::GeneratedText> texts =
      engine.generate_monitored({prompt}, greedy(engine), engine.resolve_monitors(policies),
                                [&](const inference::ScoredToken& t) {
                                  if (!t.firings.empty()) run.tokens_with_firings.push_back(t.index);
                                  return true;
                                });
  run.ids = texts.front().ids;
  run.stop = texts.front().stop;
  run.firings = texts.front().firings;
  return run;
}

inference::EngineOptions generating(const std::string& probes) {
  inference::EngineOptions options = cpu_engine_options(probes);
  options.generate = true;
  return options;
}

}  // namespace

TEST_CASE("monitor policies: a request's list and --monitor read, each mistake naming its field or flag") {
  std::vector<monitor::MonitorPolicy> read = monitor::parse_policies(Json::parse(R"([
      {"label": "deception", "layer": 20, "threshold": 0.8, "aggregate": "rolling", "window": 8, "action": "stop"},
      {"label": "refusal", "calibrated": true, "scope": "prompt", "action": "steer",
       "steer": [{"label": "refusal", "layer": 3, "coefficient": -4}]},
      {"label": "harm", "action": "ablate"}])"));
  REQUIRE(read.size() == 3);
  CHECK(read[0].layer == 20);
  CHECK(read[0].threshold == 0.8);
  CHECK(read[0].window == 8);
  CHECK(read[1].scope == monitor::Scope::kPrompt);
  CHECK_FALSE(read[1].threshold.has_value());
  REQUIRE(read[1].steering.size() == 1);
  CHECK(read[1].steering[0].coefficient == -4);
  CHECK(read[2].steering.empty());

  auto refused = [](const std::string& body, const std::string& field, const std::string& part) {
    CAPTURE(body);
    try {
      monitor::parse_policies(Json::parse(body));
      FAIL("accepted");
    } catch (const server::RequestError& e) {
      CHECK(e.status() == 400);
      CHECK(e.field() == field);
      CHECK_CONTAINS(std::string(e.what()), part);
    }
  };
  refused(R"([{"label": "x", "threshold": 1.5}])", "monitors[0].threshold", "from 0 to 1");
  refused(R"([{"label": "x", "action": "explode"}])", "monitors[0].action", "flag");
  refused(R"([{"label": "x", "aggregate": "median"}])", "monitors[0].aggregate", "rolling");
  refused(R"([{"label": "x"}, {"action": "stop"}])", "monitors[1].label", "missing");
  refused(R"([{"label": "x", "action": "steer"}])", "monitors[0].steer", "needs the steering");
  refused(R"([{"label": "x", "steer": [{"label": "x", "layer": 1, "coefficient": 2}]}])", "monitors[0].steer", "not to flag");
  refused(R"([{"label": "x", "threshold": 0.5, "calibrated": true}])", "monitors[0].threshold", "not both");
  refused(R"([{"label": "x", "colour": 1}])", "monitors[0].colour", "unknown field");
  refused(R"({"label": "x"})", "monitors", "a list");

  monitor::MonitorFlags flags;
  flags.monitors = {"deception@20=0.8:stop", "refusal:steer"};
  flags.aggregate = "ema=0.2";
  flags.on_fire_steer = {"refusal@3=-4"};
  std::vector<monitor::MonitorPolicy> given = monitor::monitor_policies(flags);
  REQUIRE(given.size() == 2);
  CHECK(given[0].label == "deception");
  CHECK(given[0].layer == 20);
  CHECK(given[0].threshold == 0.8);
  CHECK(given[0].alpha == 0.2);
  CHECK(given[0].steering.empty());
  CHECK_FALSE(given[1].layer.has_value());
  REQUIRE(given[1].steering.size() == 1);
  for (const char* bad : {"deception", "deception=2:stop", "deception@x:flag", ":stop", "deception:explode", "d:steer"}) {
    CAPTURE(bad);
    monitor::MonitorFlags wrong;
    wrong.monitors = {bad};
    CHECK_THROWS_AS(monitor::monitor_policies(wrong), UsageError);
  }
  monitor::MonitorFlags bad_aggregate;
  bad_aggregate.monitors = {"d:flag"};
  bad_aggregate.aggregate = "max=3";
  CHECK_THROWS_WITH_AS(monitor::monitor_policies(bad_aggregate), doctest::Contains("takes no parameter"), UsageError);
  // Regression: a parameter of another aggregate was taken and ignored, where --monitor-aggregate refuses it.
  refused(R"([{"label": "x", "window": 4}])", "monitors[0].window", "'monitors[0].window' goes with the aggregate 'rolling', not 'token'");
  refused(R"([{"label": "x", "aggregate": "rolling", "alpha": 0.5}])", "monitors[0].alpha", "goes with the aggregate 'ema'");
  // Regression: "calibrated": false was read and then ignored.
  CHECK_FALSE(monitor::parse_policies(Json::parse(R"([{"label": "x", "calibrated": false}])"))[0].calibrated);
  CHECK(monitor::parse_policies(Json::parse(R"([{"label": "x"}])"))[0].calibrated);
  refused(R"([{"label": "x", "threshold": 0.5, "calibrated": false}])", "monitors[0].threshold", "not both");
  // Regression: --monitor-scope without --monitor was accepted and did nothing.
  monitor::MonitorFlags scope_alone;
  scope_alone.scope = "prompt";
  CHECK_THROWS_WITH_AS(monitor::monitor_policies(scope_alone), doctest::Contains("--monitor-scope go with --monitor"),
                       UsageError);
}

TEST_CASE("monitors on the fixture model: flag, stop, steer and prompt policies fire where the scores say" * doctest::test_suite("numeric")) {
  TempDir tmp;
  const inference::Engine engine = inference::Engine::load(generating(train_probes(tmp)));
  const std::vector<inference::ScoredToken> plain = engine_generation(engine, kPrompt, kTokens);
  std::vector<int32_t> plain_ids;
  for (const inference::ScoredToken& t : plain) plain_ids.push_back(t.id);
  const std::pair<int64_t, double> point = firing_point(reframing_scores(engine, plain));
  const int64_t k = point.first;  // named, not bound: clang's C++17 captures no structured binding (CAPTURE)
  const double threshold = point.second;
  CAPTURE(k);

  SUBCASE("flag: the tokens as without it, one firing at the first token above the threshold") {
    for (const char* aggregate : {"token", "max"}) {
      Run run = monitored(engine, {policy("flag", threshold, aggregate)});
      CHECK(run.ids == plain_ids);
      REQUIRE(run.firings.size() == 1);
      CHECK(run.firings[0].index == k);
      CHECK(run.firings[0].layer == 2);
      CHECK(run.firings[0].score == doctest::Approx(reframing_scores(engine, plain)[static_cast<size_t>(k)]));
      CHECK(run.tokens_with_firings == std::vector<int64_t>{k});
    }
  }
  SUBCASE("stop: the stream ends before the token that fired, which is not sent") {
    Run run = monitored(engine, {policy("stop", threshold)});
    CHECK(run.ids == std::vector<int32_t>(plain_ids.begin(), plain_ids.begin() + k));
    CHECK(run.stop == generation::StopReason::kMonitor);
    REQUIRE(run.firings.size() == 1);
    CHECK(run.firings[0].action == "stop");
    CHECK(run.tokens_with_firings.empty());
  }
  SUBCASE("steer and ablate: the tokens up to the one after the firing as without it, the steered ones after") {
    Run steered = monitored(engine, {policy("steer", threshold)});
    REQUIRE(steered.firings.size() == 1);
    REQUIRE(steered.ids.size() == plain_ids.size());
    const auto unchanged = static_cast<std::ptrdiff_t>(std::min<int64_t>(k + 2, kTokens));
    CHECK(std::equal(plain_ids.begin(), plain_ids.begin() + unchanged, steered.ids.begin()));
    if (k + 2 < kTokens) CHECK_FALSE(std::equal(plain_ids.begin(), plain_ids.end(), steered.ids.begin()));
    Run ablated = monitored(engine, {policy("ablate", threshold)});
    REQUIRE(ablated.firings.size() == 1);
    CHECK(std::equal(plain_ids.begin(), plain_ids.begin() + unchanged, ablated.ids.begin()));
  }
  SUBCASE("prompt scope: a prompt that fires stops before any token, at the prompt token --per-token names") {
    inference::TokenScores prompt = engine.score_tokens(kPrompt);
    std::vector<double> scores;
    for (const auto& table : prompt.probability) scores.push_back(table[0][std::find(engine.labels().begin(), engine.labels().end(), "reframing") - engine.labels().begin()]);
    const std::pair<int64_t, double> prompt_point = firing_point(scores);
    const int64_t j = prompt_point.first;
    const double prompt_threshold = prompt_point.second;
    monitor::MonitorPolicy p = policy("stop", prompt_threshold);
    p.scope = monitor::Scope::kPrompt;
    Run run = monitored(engine, {p});
    CHECK(run.ids.empty());
    CHECK(run.stop == generation::StopReason::kMonitor);
    REQUIRE(run.firings.size() == 1);
    CHECK(run.firings[0].index == j);
    CHECK(run.firings[0].scope == monitor::Scope::kPrompt);
    p.action = "flag";
    Run flagged = monitored(engine, {p});
    CHECK(flagged.ids == plain_ids);
    CHECK(flagged.tokens_with_firings == std::vector<int64_t>{0});  // reported with the first token
  }
  SUBCASE("policies the probes cannot run are refused naming the field") {
    monitor::MonitorPolicy unknown = policy("flag", 0.5);
    unknown.label = "nonsense";
    CHECK_THROWS_WITH_AS(engine.resolve_monitors({policy("flag", 0.5), unknown}), doctest::Contains("monitors[1].label"),
                         monitor::PolicyError);
    monitor::MonitorPolicy layer = policy("flag", 0.5);
    layer.layer = 3;
    CHECK_THROWS_WITH_AS(engine.resolve_monitors({layer}), doctest::Contains("no probe at layer 3"), monitor::PolicyError);
    monitor::MonitorPolicy best = policy("flag", 0.5);
    best.layer.reset();
    best.threshold.reset();
    const monitor::ResolvedMonitor resolved = engine.resolve_monitors({best})->front();
    CHECK((resolved.layer == 2 || resolved.layer == 5));
    CHECK(resolved.threshold_source == "validation");
  }
}

TEST_CASE("ema probes: each token's own score beside the text's, in --per-token and in what token monitors read" * doctest::test_suite("numeric")) {
  TempDir tmp;
  ProbeFixture fixture = attention_fixture(3);
  fixture.flags = "--model-type ema";
  const std::string probes = train_fixture_probes(tmp, fixture);
  const inference::Engine engine = inference::Engine::load(generating(probes));
  const size_t k = static_cast<size_t>(std::find(engine.labels().begin(), engine.labels().end(), "reframing") - engine.labels().begin());

  // --per-token: the token's own score (sigmoid of the linear score the ema weighs) beside the text's.
  const inference::TokenScores scores = engine.score_tokens(kPrompt);
  REQUIRE(scores.token_probability.size() == scores.probability.size());
  CHECK(std::isnan(scores.token_probability[0][0][k]));  // the BOS, which the probe does not read, has no score
  bool differ = false;
  for (size_t t = 1; t < scores.probability.size(); ++t) {
    const double own = scores.token_probability[t][0][k];
    CHECK((own > 0.0 && own < 1.0));
    differ = differ || std::abs(own - scores.probability[t][0][k]) > 1e-6;
  }
  CHECK(differ);
  CommandResult r = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu --text '{}' --per-token --json",
                                            tool("multi_probe_inference"), probes, kGemmaModel, kPrompt));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const Json shown = Json::parse(r.output.substr(r.output.find('{')));
  REQUIRE(shown["tokens"].size() == scores.probability.size());
  CHECK(shown["tokens"][0]["token_scores"].empty());
  const Json& second = shown["tokens"][1]["token_scores"];
  REQUIRE(second.is_array());
  REQUIRE_FALSE(second.empty());
  const auto reframing = std::find_if(second.begin(), second.end(), [](const Json& e) { return e["label"] == "reframing"; });
  REQUIRE(reframing != second.end());
  CHECK((*reframing)["score"].get<double>() == doctest::Approx(scores.token_probability[1][0][k]).epsilon(1e-6));
  // Generation: a token monitor fires on the token's own score, a probe monitor on the text's.
  const std::vector<inference::ScoredToken> plain = engine_generation(engine, kPrompt, kTokens);
  std::vector<double> own, text;
  for (const inference::ScoredToken& t : plain) {
    REQUIRE(t.token_probability.size() == 1);
    own.push_back(t.token_probability[0][k]);
    text.push_back(t.probability[0][k]);
  }
  const std::pair<int64_t, double> own_point = firing_point(own);
  const int64_t own_index = own_point.first;
  CAPTURE(own_index);
  Run run = monitored(engine, {policy("flag", own_point.second)});
  REQUIRE(run.firings.size() == 1);
  CHECK(run.firings[0].index == own_index);
  CHECK(run.firings[0].score == doctest::Approx(own[static_cast<size_t>(own_index)]));
  // A probe monitor just under the first token's text score fires there with that score, not the token's own.
  REQUIRE(std::abs(text[0] - own[0]) > 1e-3);
  run = monitored(engine, {policy("flag", text[0] - 1e-4, "probe")});
  REQUIRE(run.firings.size() == 1);
  CHECK(run.firings[0].index == 0);
  CHECK(run.firings[0].score == doctest::Approx(text[0]));
}

TEST_CASE("monitored streams joining and decoding together give what each gives alone" * doctest::test_suite("numeric")) {
  TempDir tmp;
  const inference::Engine engine = inference::Engine::load(generating(train_probes(tmp)));
  const std::pair<int64_t, double> point = firing_point(reframing_scores(engine, engine_generation(engine, kPrompt, kTokens)));
  const int64_t k = point.first;
  const double threshold = point.second;
  const std::vector<std::vector<monitor::MonitorPolicy>> policies = {
      {policy("steer", threshold)}, {policy("stop", threshold)}, {}, {policy("flag", threshold, "rolling")}};
  const std::vector<std::string> prompts = {kPrompt, kPrompt, "The weather today", kPrompt};
  std::vector<Run> alone;
  for (size_t i = 0; i < policies.size(); ++i) alone.push_back(monitored(engine, policies[i], prompts[i]));
  std::vector<Run> together(policies.size());
  inference::StreamBatch batch(engine);
  std::vector<inference::StreamRequest> requests;
  for (size_t i = 0; i < policies.size(); ++i) {
    inference::StreamRequest request;
    request.prompt_ids = engine.tokenizer().encode(prompts[i], true);
    request.options = greedy(engine);
    request.monitors = engine.resolve_monitors(policies[i]);
    request.on_token = [](const inference::ScoredToken&) { return true; };
    request.on_end = [&together, i](const inference::GeneratedText& done, std::exception_ptr error) {
      REQUIRE_FALSE(error);
      together[i] = Run{done.ids, done.stop, done.firings, {}};
    };
    requests.push_back(std::move(request));
  }
  // The first stream joins alone, the other three together (one pass over their prompts, of two lengths).
  std::vector<inference::StreamRequest> first;
  first.push_back(std::move(requests.front()));
  requests.erase(requests.begin());
  CHECK(batch.join(std::move(first)) == 1);
  CHECK(batch.join(std::move(requests)) == 3);
  while (!batch.empty()) batch.step();
  for (size_t i = 0; i < policies.size(); ++i) {
    CAPTURE(i);
    CHECK(together[i].ids == alone[i].ids);
    CHECK(together[i].stop == alone[i].stop);
    REQUIRE(together[i].firings.size() == alone[i].firings.size());
    for (size_t f = 0; f < alone[i].firings.size(); ++f) {
      CHECK(together[i].firings[f].index == alone[i].firings[f].index);
      CHECK(together[i].firings[f].score == doctest::Approx(alone[i].firings[f].score).epsilon(1e-6));
    }
  }
  CHECK(alone[1].stop == generation::StopReason::kMonitor);
  CHECK(alone[1].ids.size() == static_cast<size_t>(k));

  // --batch-size streams at a time: the later prompts join as earlier streams leave, each still as alone.
  inference::EngineOptions one_at_a_time = generating(tmp.file("probes"));
  one_at_a_time.batch_size = 1;
  const inference::Engine narrow = inference::Engine::load(one_at_a_time);
  std::vector<std::string> rows;
  for (size_t i = 0; i < prompts.size(); ++i) rows.push_back(prompts[i]);
  const std::vector<inference::GeneratedText> texts =
      narrow.generate_monitored(rows, greedy(narrow), narrow.resolve_monitors({policy("stop", threshold)}),
                                [](const inference::ScoredToken&) { return true; });
  REQUIRE(texts.size() == prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    CHECK(texts[i].ids == monitored(engine, {policy("stop", threshold)}, prompts[i]).ids);
  }

  // Sampled, row i draws as generate's row i (or its key: regression, ignored), whatever --batch-size and monitors.
  generation::GenerationOptions sampled = greedy(narrow), keyed = sampled;
  sampled.sampling = keyed.sampling = {1.0, 0, 1.0, 7};
  keyed.row_keys = {1, 0, 1};
  const std::vector<std::string> same(3, rows.front());
  const auto any = [](const inference::ScoredToken&) { return true; };
  const std::vector<inference::GeneratedText> plain = engine.generate(same, sampled, any);
  for (const generation::GenerationOptions& options : {sampled, keyed}) {
    const auto streamed = narrow.generate_monitored(same, options, narrow.resolve_monitors({policy("flag", 1.0)}), any);
    const auto parts = narrow.generate(same, options, any);
    for (size_t i = 0; i < same.size(); ++i) {
      CAPTURE(i);
      const size_t drawn_as = options.row_keys.empty() ? i : options.row_keys[i];
      CHECK(streamed[i].ids == plain[drawn_as].ids);
      CHECK(parts[i].ids == plain[drawn_as].ids);
    }
  }
  CHECK(plain[0].ids != plain[1].ids);
}

TEST_CASE("streams joining together: one whose prompt the model refuses ends with the error, the others decode as alone") {
  TempDir tmp;
  const inference::Engine engine = inference::Engine::load(generating(train_probes(tmp)));
  const std::vector<std::vector<int32_t>> prompts = {engine.tokenizer().encode(kPrompt, true),
                                                     {1, static_cast<int32_t>(engine.model().config().vocab_size)},
                                                     engine.tokenizer().encode("The weather today", true)};
  std::vector<std::vector<int32_t>> ids(prompts.size());
  std::vector<std::string> errors(prompts.size());
  std::vector<int> ends(prompts.size(), 0);
  std::vector<inference::StreamRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    inference::StreamRequest request;
    request.prompt_ids = prompts[i];
    request.options = greedy(engine);
    request.on_token = [](const inference::ScoredToken&) { return true; };
    request.on_end = [&ids, &errors, &ends, i](const inference::GeneratedText& done, std::exception_ptr error) {
      ++ends[i];
      ids[i] = done.ids;
      try {
        if (error) std::rethrow_exception(error);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    };
    requests.push_back(std::move(request));
  }
  inference::StreamBatch batch(engine);
  CHECK(batch.join(std::move(requests)) == 2);
  CHECK(batch.size() == 2);
  while (!batch.empty()) batch.step();
  CHECK(ends == std::vector<int>{1, 1, 1});
  CHECK(errors[1].find("is outside the model's vocabulary") != std::string::npos);
  CHECK(ids[1].empty());
  CHECK(errors[0].empty());
  CHECK(errors[2].empty());
  CHECK(ids[0] == monitored(engine, {}).ids);
  CHECK(ids[2] == monitored(engine, {}, "The weather today").ids);
}

TEST_CASE("probe_server: monitors on /v1/generate and /v1/chat/completions stop, flag and name a bad policy's field" * doctest::test_suite("numeric")) {
  TempDir tmp;
  RunningServer s(options_for(train_probes(tmp)));
  const Json stop_at_once = Json::array({{{"label", "reframing"}, {"layer", 2}, {"threshold", 0}, {"action", "stop"}}});
  httplib::Result r = post(s, "/v1/generate", Json({{"prompt", kPrompt}, {"max_new_tokens", 6}, {"monitors", stop_at_once}}).dump());
  REQUIRE(r);
  REQUIRE(r->status == 200);
  std::vector<ServerEvent> events = parse_events(r->body);
  REQUIRE(events.size() == 1);
  CHECK(events[0].name == "done");
  CHECK(events[0].data["reason"] == "monitor");
  CHECK(events[0].data["tokens"] == 0);
  REQUIRE(events[0].data["monitor_firings"].size() == 1);
  CHECK(events[0].data["monitor_firings"][0]["index"] == 0);
  CHECK(events[0].data["monitor_firings"][0]["action"] == "stop");

  const Json flag_at_once = Json::array({{{"label", "reframing"}, {"threshold", 0}, {"aggregate", "max"}}});
  r = post(s, "/v1/generate", Json({{"prompt", kPrompt}, {"max_new_tokens", 3}, {"stop", false}, {"monitors", flag_at_once}}).dump());
  REQUIRE(r);
  events = parse_events(r->body);
  REQUIRE(events.size() == 4);
  CHECK(events[0].data["monitor"]["label"] == "reframing");
  CHECK_FALSE(events[1].data.contains("monitor"));
  CHECK(events[3].data["reason"] == "length");
  CHECK(events[3].data["monitor_firings"].size() == 1);

  const Json messages = Json::array({{{"role", "user"}, {"content", "Tell me a story."}}});
  Json completion = post_json(s, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 5}, {"temperature", 0},
                                                          {"monitors", stop_at_once}});
  CHECK(completion["choices"][0]["finish_reason"] == "content_filter");
  CHECK(completion["choices"][0]["message"]["content"] == "");
  CHECK(completion["usage"]["completion_tokens"] == 0);
  CHECK(completion["monitor_firings"].size() == 1);

  check_refused(s, "/v1/generate", Json({{"prompt", kPrompt}, {"monitors", {{{"label", "nonsense"}}}}}).dump(), 400,
                {"no probes for label 'nonsense'"}, "monitors[0].label");
  r = post(s, "/v1/chat/completions",
           Json({{"messages", messages}, {"monitors", {{{"label", "reframing"}, {"threshold", 2}}}}}).dump());
  REQUIRE(r);
  CHECK(r->status == 400);
  const Json error = Json::parse(r->body)["error"];
  CHECK_CONTAINS(error["message"].get<std::string>(), "from 0 to 1");
  CHECK(error["param"] == "monitors[0].threshold");
}

TEST_CASE("multi_probe_inference --generate --monitor: the firing in each output, exit 2 for a malformed policy") {
  TempDir tmp;
  const std::string probes = train_probes(tmp);
  CommandResult r = run_command(fmt::format("{} --probes-dir {} --text '{}' --generate --max-new-tokens 4 --no-stop --json "
                                            "--monitor reframing@2=0:stop --device cpu",
                                            tool("multi_probe_inference"), probes, kPrompt));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const std::string last_line = r.output.substr(r.output.rfind("\n{") + 1);
  Json done = Json::parse(last_line);
  CHECK(done["stop"] == "monitor");
  CHECK(done["generated_ids"].empty());
  CHECK(done["monitor_firings"][0]["label"] == "reframing");
  r = run_command(fmt::format("{} --probes-dir {} --text '{}' --generate --max-new-tokens 3 --no-stop "
                              "--monitor reframing=0:flag --device cpu",
                              tool("multi_probe_inference"), probes, kPrompt));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_CONTAINS(r.output, "⚑ reframing@L");
  CHECK_CONTAINS(r.output, "monitors fired:");
  for (const char* bad : {"--monitor reframing=7:stop", "--monitor reframing:explode", "--monitor nonsense:flag",
                          "--monitor reframing:steer", "--monitor reframing:flag --on-fire-steer reframing@2=4"}) {
    r = run_command(fmt::format("{} --probes-dir {} --text '{}' --generate --max-new-tokens 2 {} --device cpu",
                                tool("multi_probe_inference"), probes, kPrompt, bad));
    CHECK_MESSAGE(r.exit_code == 2, bad, ": ", r.output);
  }
  r = run_command(fmt::format("{} --probes-dir {} --text '{}' --monitor reframing:flag --device cpu",
                              tool("multi_probe_inference"), probes, kPrompt));
  CHECK(r.exit_code == 2);
  CHECK_CONTAINS(r.output, "goes with --generate");
  // Regression: the probes' refusal named the policy's JSON field ('monitors[0].layer'), not the flag.
  r = run_command(fmt::format("{} --probes-dir {} --text '{}' --generate --max-new-tokens 2 --monitor reframing@3:flag "
                              "--device cpu",
                              tool("multi_probe_inference"), probes, kPrompt));
  check_failure(r, 2, {"--monitor reframing@3:flag: label 'reframing' has no probe at layer 3"});
}

TEST_CASE("a prompt monitor on probes read without a suffix never fires on the BOS, which they do not read" *
          doctest::test_suite("numeric")) {
  TempDir tmp;
  capture::CaptureOptions capture = three_action_capture(tmp, 60, "cpu");
  capture.model_dir = kGemmaModel;
  capture.output_dir = tmp.file("activations");
  capture.layers = "2";
  capture.position = Position::kAll;
  capture.prompt_suffix = "";
  capture::run_capture(capture);
  CommandResult r = run_command(fmt::format("{} --activations {} --output-dir {} --epochs 3 --device cpu --quiet "
                                            "--model-type multimax",
                                            tool("train_binary_probes"), tmp.file("activations"), tmp.file("probes")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const inference::Engine engine = inference::Engine::load(generating(tmp.file("probes")));
  // Regression: the prefix of the BOS alone was scored on the BOS's row, which multimax probes never saw, and a
  // prompt monitor stopped every prompt there.
  const inference::TokenScores scores = engine.score_tokens(kPrompt);
  for (double score : scores.probability[0][0]) CHECK(std::isnan(score));
  for (size_t t = 1; t < scores.probability.size(); ++t) CHECK_FALSE(std::isnan(scores.probability[t][0][0]));
  // Regression: the heatmap took its columns from the first token's scores, the BOS's, and had none.
  inference::TokenTable table;
  table.tokens = scores.tokens;
  table.texts = scores.texts;
  for (const auto& p : scores.probability) table.scores.push_back(inference::table_of(engine, p, inference::Display{}));
  CHECK_CONTAINS(inference::per_token_html(table, "scores"), "<th><div>" + engine.labels()[0] + "</div></th>");
  monitor::MonitorPolicy anything = policy("stop", 0.0);
  anything.layer.reset();
  anything.scope = monitor::Scope::kPrompt;
  for (const char* aggregate : {"token", "probe"}) {
    CAPTURE(aggregate);
    anything.aggregate = aggregate;
    Run run = monitored(engine, {anything});
    REQUIRE(run.firings.size() == 1);
    CHECK(run.firings[0].index == 1);
  }
  // A long prompt's prefixes take a pass per 64 of them, each announced to the stream's before_pass first: what it
  // throws ends the stream there, before its prompt runs (regression: the server's deadline did not end this reading).
  std::string long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt += "Once upon a time, ";
  std::vector<inference::StreamRequest> one(1);
  one[0].prompt_ids = engine.tokenizer().encode(long_prompt, true);
  REQUIRE(one[0].prompt_ids.size() > 130);
  one[0].options = greedy(engine);
  one[0].monitors = engine.resolve_monitors({anything});
  int passes = 0;
  one[0].before_pass = [&passes] {
    if (++passes == 2) throw std::runtime_error("its deadline has passed");
  };
  std::exception_ptr ended;
  one[0].on_end = [&ended](const inference::GeneratedText& done, std::exception_ptr error) {
    CHECK(done.ids.empty());
    ended = error;
  };
  inference::StreamBatch batch(engine);
  CHECK(batch.join(std::move(one)) == 0);
  CHECK(batch.empty());
  CHECK(passes == 2);
  REQUIRE(ended);
  CHECK_THROWS_WITH(std::rethrow_exception(ended), "its deadline has passed");
  // Calibrated on that capture, every token of it: a monitor compares each token with the per-token threshold.
  probes::calibrate({tmp.file("probes"), tmp.file("activations"), 0.05});
  const Json calibration = read_json_file(tmp.file("probes/probes.json"))["probes"][0]["calibration"];
  REQUIRE(calibration.contains("per_token"));
  const inference::Engine calibrated = inference::Engine::load(generating(tmp.file("probes")));
  monitor::MonitorPolicy watch;
  watch.label = read_json_file(tmp.file("probes/probes.json"))["probes"][0]["label"].get<std::string>();
  const monitor::ResolvedMonitor resolved = calibrated.resolve_monitors({watch})->front();
  CHECK(resolved.threshold_source == "calibration");
  CHECK(resolved.threshold == calibration["per_token"]["threshold"].get<double>());
}

}  // namespace probekit::testing
