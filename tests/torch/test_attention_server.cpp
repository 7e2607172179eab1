// probe_server with attention probes: /v1/per-token carries each token's attention as multi_probe_inference prints
// it, and a /v1/generate stream (continuous batching, the text so far read whole at each token) gives the engine's
// own generation's scores.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>

#include "generation/flags.h"
#include "probe_fixture.h"
#include "server_runs.h"
#include "test_paths.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

namespace {

httplib::Result stream(const RunningServer& s, const Json& body, std::string& received) {
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/generate";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    received.append(data, size);
    return true;
  };
  return s.client().send(req);
}

}  // namespace

TEST_CASE("probe_server with attention probes: /v1/per-token carries attention; /v1/generate scores as the engine does") {
  TempDir tmp;
  std::string probes = train_fixture_probes(tmp, attention_fixture(3));
  RunningServer s(options_for(probes));
  Json served = post_json(s, "/v1/per-token", {{"text", kReframingText}});
  CommandResult printed = run_command(fmt::format("{} --probes-dir {} --device cpu --json --per-token --text \"{}\"",
                                                  tool("multi_probe_inference"), probes, kReframingText));
  REQUIRE_MESSAGE(printed.exit_code == 0, printed.output);
  Json cli = Json::parse(printed.output.substr(printed.output.find('{')));
  REQUIRE(served["tokens"].size() == cli["tokens"].size());
  const Json& weights = served["tokens"][2]["attention"];
  REQUIRE(weights.size() == cli["tokens"][2]["attention"].size());
  REQUIRE(weights.size() == 3);
  for (size_t i = 0; i < weights.size(); ++i) {
    CHECK(weights[i]["weight"].get<double>() ==
          doctest::Approx(cli["tokens"][2]["attention"][i]["weight"].get<double>()).epsilon(1e-6));
  }
  CHECK(served["suffix_attention"].size() == cli["suffix_attention"].size());

  std::string received;
  httplib::Result r = stream(s, {{"prompt", "Once upon a time"}, {"max_new_tokens", 3}, {"stop", false}, {"top_k", 3}},
                             received);
  REQUIRE(r);
  REQUIRE_MESSAGE(r->status == 200, received);
  std::vector<ServerEvent> events = parse_events(received);
  REQUIRE(events.size() == 4);
  const inference::Engine& engine = s.server().engine();
  const std::vector<inference::ScoredToken> expected = engine_generation(engine, "Once upon a time", 3);
  REQUIRE(expected.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(events[i].data["id"] == expected[i].id);
    REQUIRE(events[i].data["predictions"].size() == 3);
    for (const Json& p : events[i].data["predictions"]) {
      const auto& labels = engine.labels();
      auto k = static_cast<size_t>(std::find(labels.begin(), labels.end(), p["label"].get<std::string>()) - labels.begin());
      CHECK(p["confidence"].get<double>() == doctest::Approx(expected[i].probability[0][k]).epsilon(1e-6));
    }
  }
}
