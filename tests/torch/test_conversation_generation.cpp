// Generation with probes trained on conversations: a chat prompt read at the probes' mask (user: the prompt's user
// turn and no reply token; last_assistant: the reply alone), texts refused as ranking refuses them, in the engine,
// the tool and the server; a user's text the template trims keeps no chat from the assistant's mask.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "chat/conversation.h"
#include "common/error.h"
#include "conversation_fixture.h"
#include "generation/flags.h"
#include "inference/engine.h"
#include "server_runs.h"
#include "test_util.h"

using namespace probekit;
using namespace probekit::testing;

TEST_CASE("generation reads a chat's tokens in the probes' mask: user-mask probes the prompt's user turn and no reply "
          "token, last_assistant-mask probes the reply alone") {
  generation::GenerationFlags flags;
  flags.options.max_new_tokens = 3;
  flags.no_stop = true;
  const OrderedJson question = chat::user_message("How was the day?");
  const chat::Conversation conversation{question, OrderedJson()};
  for (const TokenMask mask : {TokenMask::kUser, TokenMask::kLastAssistant}) {
    CAPTURE(token_mask_name(mask));
    TempDir tmp;
    capture::CaptureOptions o = conversation_capture(tmp, Position::kAll, "act");
    o.mask = mask;
    inference::EngineOptions options = train_conversation_probes(o, tmp.file("probes"), "multimax");
    options.generate = true;
    const inference::Engine generator = inference::Engine::load(options);
    REQUIRE(generator.recipe().mask == mask);
    const std::string rendered = chat::render_conversation(kGemmaModel, conversation);
    const std::vector<uint8_t> prompt_mask =
        generator.chat_prompt_mask(conversation, rendered, generator.tokenizer().encode(rendered, false));
    std::vector<std::vector<double>> scores;  // each reply token's scores at layer 2
    const std::vector<inference::GeneratedText> texts = generator.generate_monitored(
        {rendered}, generation::resolve_generation_flags(flags, generator.model_dir()), generator.resolve_monitors({}),
        [&scores](const inference::ScoredToken& t) {
          scores.push_back(t.probability[0]);
          return true;
        },
        false, {prompt_mask});
    REQUIRE(scores.size() == 3);
    // The user's turn is in the prompt's mask and no reply token is; for last_assistant, the reply's tokens alone
    // (each but a turn's end).
    const std::vector<uint8_t> so_far = generator.text_so_far_mask(prompt_mask, texts[0].ids);
    const auto prompt_read = std::count(prompt_mask.begin(), prompt_mask.end(), 1);
    const auto reply_read = std::count(so_far.begin() + static_cast<std::ptrdiff_t>(prompt_mask.size()), so_far.end(), 1);
    CHECK((mask == TokenMask::kUser ? prompt_read > 0 : prompt_read == 0));
    CHECK(reply_read == (mask == TokenMask::kUser ? 0 : 3));
    // A prompt's ranking (the user's turn alone: the last-assistant mask reads none of it).
    const std::vector<inference::TextScores> ranked =
        mask == TokenMask::kUser ? generator.score_conversations({question.dump()}) : std::vector<inference::TextScores>();
    for (size_t k = 0; k < generator.labels().size(); ++k) {
      CAPTURE(k);
      for (size_t t = 0; t < scores.size(); ++t) {
        CAPTURE(t);
        if (mask == TokenMask::kUser) {
          // Each reply token scores the prompt's user turn alone, as its ranking does.
          CHECK(scores[t][k] == doctest::Approx(ranked[0].probability[0][k]).epsilon(1e-5));
        } else {
          // Each reads the reply so far: the first its own row alone (regression guard: a reply read as outside
          // the mask scores NaN, as the prompt does).
          CHECK_FALSE(std::isnan(scores[t][k]));
        }
      }
    }
    // A text has no token in their mask (regression: generation read a template-less prompt whole, where ranking
    // refused it).
    CHECK_THROWS_WITH_AS(generator.generate({"How was the day?"}, generation::resolve_generation_flags(flags, generator.model_dir()),
                                            [](const inference::ScoredToken&) { return true; }),
                         doctest::Contains("trained on conversations"), UsageError);
  }
}

TEST_CASE("conversation probes: the tool and the server refuse a text to generate after, and serve a chat whose user "
          "text the template trims") {
  TempDir tmp;
  const capture::CaptureOptions o = conversation_capture(tmp, Position::kLast, "act");
  train_conversation_probes(o, tmp.file("probes"), "linear");
  CommandResult r = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu --generate --max-new-tokens 2 "
                                            "--text Help", tool("multi_probe_inference"), tmp.file("probes"), kGemmaModel));
  check_failure(r, 2, {"these probes were trained on conversations' assistant tokens"});
  // Regression: multi_probe_inference loaded the model before refusing a text to rank, or a --file of texts.
  write_text(tmp.file("texts.jsonl"), "{\"text\": \"Help\", \"messages\": []}\n");
  for (const std::string& texts : {std::string("--text Help"), "--file " + tmp.file("texts.jsonl"), std::string("< /dev/null")}) {
    INFO(texts);
    r = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu -v {}", tool("multi_probe_inference"),
                                tmp.file("probes"), kGemmaModel, texts));
    check_failure(r, 2, {"these probes were trained on conversations' assistant tokens"});
    CHECK_MESSAGE(r.output.find("model loaded") == std::string::npos, r.output);
  }
  // Regression: steering_sweep, whose prompts are texts, loaded the model before refusing them.
  write_text(tmp.file("prompts.txt"), "Help\n");
  r = run_command(fmt::format("{} --probes-dir {} --model {} --layer 2 --labels calm --coefficients 4 --file {} --device cpu "
                              "--output-dir {} -v", tool("steering_sweep"), tmp.file("probes"), kGemmaModel,
                              tmp.file("prompts.txt"), tmp.file("sweep")));
  check_failure(r, 2, {"these probes were trained on conversations' assistant tokens"});
  CHECK_MESSAGE(r.output.find("model loaded") == std::string::npos, r.output);
  // Regression: a user's trailing newline, which Gemma's template trims, failed every chat: 400 "the chat template
  // rewrites it", though the assistant's mask never reads the user's text.
  r = run_command(fmt::format("{} --probes-dir {} --model {} --device cpu --generate --chat --max-new-tokens 2 --text 'Help "
                              "' --json", tool("multi_probe_inference"), tmp.file("probes"), kGemmaModel));
  CHECK_MESSAGE(r.exit_code == 0, r.output);
  server::ServerOptions options = options_for(tmp.file("probes"));
  options.engine.model_dir = kGemmaModel;
  RunningServer s(options);
  const Json chat = {{"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", "Please review this:\n"}}}}};
  CHECK(post_json(s, "/v1/chat/completions", chat)["usage"]["completion_tokens"] == 2);
  // Regression: /v1/generate read the text whole; /v1/rank and /v1/per-token named no field.
  check_refused(s, "/v1/generate", R"({"prompt": "Help", "max_new_tokens": 2})", 400,
                {"trained on conversations' assistant tokens"}, "prompt");
  check_refused(s, "/v1/rank", R"({"texts": ["Help"]})", 400, {"trained on conversations' assistant tokens"}, "texts");
  check_refused(s, "/v1/per-token", R"({"text": "Help"})", 400, {"trained on conversations' assistant tokens"}, "text");
  // Gemma 3's template never reads tools: refused naming that field, as chat completions names it (regression: messages).
  const std::string with_tools = R"({"messages": [{"role": "user", "content": "Help"}, {"role": "assistant", "content": "Yes"}],
                                     "tools": [{"type": "function", "function": {"name": "get_weather"}}]})";
  check_refused(s, "/v1/rank", with_tools, 400, {"never reads 'tools'"}, "tools");
  check_refused(s, "/v1/per-token", with_tools, 400, {"never reads 'tools'"}, "tools");
}

TEST_CASE("calibrate_probes prints the per-token threshold monitors compare each token with") {
  TempDir tmp;
  const capture::CaptureOptions o = conversation_capture(tmp, Position::kAll, "act");
  train_conversation_probes(o, tmp.file("probes"), "multimax");
  // Regression: the text named only the whole-text threshold; monitors read the per-token one.
  const CommandResult r = run_command(fmt::format("{} --probes-dir {} --activations {} --target-fpr 0.05",
                                                  tool("calibrate_probes"), tmp.file("probes"), tmp.file("act")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const Json calibration = read_json_file(tmp.file("probes/probes.json"))["probes"][0]["calibration"];
  CHECK_CONTAINS(r.output, fmt::format(", per token {:.6g}, flags ", calibration["per_token"]["threshold"].get<double>()));
  CHECK_CONTAINS(r.output, "calibrating: 1/1 layers");  // regression: no progress was shown
}
