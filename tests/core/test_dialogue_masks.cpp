// Conversations' token masks against transformers and tokenizers (tests/fixtures/dialogues: the real Gemma 3, Qwen 3
// and Llama 3 templates and tokenizers, fetched by scripts/fetch_tokenizers.sh): the render, the ids of the rendered
// text without added special tokens, and which tokens are assistant or user content must equal theirs.
#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat/conversation.h"
#include "chat/token_masks.h"
#include "common/files.h"
#include "common/json.h"
#include "test_paths.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;

namespace {

std::string tokenizer_dir(const std::string& name) {
  std::string dir = std::string(PROBEKIT_TOKENIZER_CACHE) + "/" + name;
  if (!is_regular_file(dir + "/tokenizer.json")) {
    FAIL("missing ", dir, "/tokenizer.json: run scripts/fetch_tokenizers.sh to fetch the real tokenizers");
  }
  return dir;
}

std::vector<uint8_t> fixture_mask(const Json& conversation, const char* key) {
  return conversation.at(key).get<std::vector<uint8_t>>();
}

}  // namespace

TEST_CASE("conversations' renders, ids and assistant/user masks equal transformers' on the real templates") {
  for (const char* name : {"gemma3", "qwen3", "llama3"}) {
    const std::string dir = tokenizer_dir(name);
    const tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::from_file(dir + "/tokenizer.json");
    const Json fixture = read_json_file(std::string(PROBEKIT_FIXTURES) + "/dialogues/" + name + ".json");
    for (size_t c = 0; c < fixture.at("conversations").size(); ++c) {
      const Json& conversation = fixture.at("conversations")[c];
      INFO(name << " conversation " << c);
      const chat::OrderedJson messages = chat::OrderedJson::parse(conversation.at("messages").dump());
      const std::string rendered = chat::render_conversation(dir, messages, false);
      REQUIRE(rendered == conversation.at("rendered").get<std::string>());
      const std::vector<int32_t> ids = tokenizer.encode(rendered, false);
      REQUIRE(ids == conversation.at("ids").get<std::vector<int32_t>>());
      const auto spans = tokenizer.token_spans(ids, rendered);
      const std::vector<chat::ContentSpan> contents = chat::content_spans(messages, rendered);
      CHECK(chat::token_mask(spans, contents, TokenMask::kAssistant) == fixture_mask(conversation, "assistant_mask"));
      CHECK(chat::token_mask(spans, contents, TokenMask::kUser) == fixture_mask(conversation, "user_mask"));
      CHECK(chat::token_mask(spans, contents, TokenMask::kAll) == std::vector<uint8_t>(ids.size(), 1));
    }
  }
}

TEST_CASE("last-assistant reads the last assistant message only; a rewritten content is an error naming it") {
  const std::string dir = tokenizer_dir("qwen3");
  const tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::from_file(dir + "/tokenizer.json");
  const chat::OrderedJson messages = chat::OrderedJson::parse(R"([{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello there"}, {"role": "user", "content": "Again"},
      {"role": "assistant", "content": "Hello again"}])");
  const std::string rendered = chat::render_conversation(dir, messages, false);
  const std::vector<int32_t> ids = tokenizer.encode(rendered, false);
  const auto spans = tokenizer.token_spans(ids, rendered);
  const auto contents = chat::content_spans(messages, rendered);
  const std::vector<uint8_t> last = chat::token_mask(spans, contents, TokenMask::kLastAssistant);
  const std::vector<uint8_t> every = chat::token_mask(spans, contents, TokenMask::kAssistant);
  std::string read_last, read_every;
  for (size_t t = 0; t < ids.size(); ++t) {
    if (last[t]) read_last += rendered.substr(spans[t].first, spans[t].second - spans[t].first);
    if (every[t]) read_every += rendered.substr(spans[t].first, spans[t].second - spans[t].first);
  }
  CHECK(read_last == "Hello again");
  CHECK(read_every == "Hello thereHello again");

  const chat::OrderedJson rewritten = chat::OrderedJson::parse(R"([{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "<think>\nhidden\n</think>\n\nshown"}, {"role": "user", "content": "Next"}])");
  CHECK_THROWS_WITH(chat::content_spans(rewritten, chat::render_conversation(dir, rewritten, false)),
                    doctest::Contains("messages[1] (assistant): its content \"<think>\\nhidden"));
}

TEST_CASE("a content that also occurs in the template's text before it is masked where the template printed it") {
  for (const char* name : {"gemma3", "qwen3", "llama3"}) {
    const std::string dir = tokenizer_dir(name);
    const tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::from_file(dir + "/tokenizer.json");
    const chat::ChatTemplate chat = chat::ChatTemplate::from_tokenizer_dir(dir);
    for (const char* reply : {"d", "a", "model", "start", "user", "assistant", "|", "<", "end"}) {
      INFO(name << " reply " << reply);
      chat::ChatTemplateInputs inputs;
      inputs.add_generation_prompt = false;
      inputs.messages = chat::OrderedJson::parse(R"([{"role": "user", "content": "Which is right? a, b, c or d"}])");
      inputs.messages.push_back({{"role", "assistant"}, {"content", reply}});
      const std::string rendered = chat.render(inputs);
      const std::vector<int32_t> ids = tokenizer.encode(rendered, false);
      const auto spans = tokenizer.token_spans(ids, rendered);
      // Regression: the search from the end of the user's content found the reply in the turn markers or the
      // assistant's header ("<end_of_turn>", "<|im_start|>", "model"), and masked those tokens.
      const std::vector<uint8_t> mask = chat::token_mask(spans, chat::locate_contents(chat, inputs, rendered), TokenMask::kAssistant);
      std::string read;
      for (size_t t = 0; t < ids.size(); ++t) {
        if (mask[t]) read += rendered.substr(spans[t].first, spans[t].second - spans[t].first);
      }
      CHECK(read == reply);
    }
  }
}

TEST_CASE("whitespace the template trims around a message the mask does not read keeps no token from the mask") {
  for (const char* name : {"gemma3", "qwen3", "llama3"}) {
    const std::string dir = tokenizer_dir(name);
    const tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::from_file(dir + "/tokenizer.json");
    const chat::ChatTemplate chat = chat::ChatTemplate::from_tokenizer_dir(dir);
    INFO(name);
    chat::ChatTemplateInputs inputs;
    inputs.add_generation_prompt = false;
    // Regression: Gemma's and Llama's templates trim the user's text, and the assistant's mask was refused for it;
    // the user's text as written also found inside the reply ("1\n" in "Step 1\n") moved the search past the reply.
    for (const auto& [user_text, reply] : {std::pair{"  Please review this:\n", "It reads well"}, std::pair{"1\n", "Step 1\nthen 2"}}) {
      const std::string user = user_text;  // named, not bound: clang's C++17 captures no structured binding (INFO)
      INFO(user);
      inputs.messages = chat::OrderedJson::array({{{"role", "user"}, {"content", user}}, {{"role", "assistant"}, {"content", reply}}});
      const std::string rendered = chat.render(inputs);
      const auto spans = tokenizer.token_spans(tokenizer.encode(rendered, false), rendered);
      const std::vector<uint8_t> mask =
          chat::token_mask(spans, chat::locate_contents(chat, inputs, rendered, TokenMask::kAssistant), TokenMask::kAssistant);
      std::string read;
      for (size_t t = 0; t < spans.size(); ++t) {
        if (mask[t]) read += rendered.substr(spans[t].first, spans[t].second - spans[t].first);
      }
      CHECK(read == reply);
    }
    inputs.messages = chat::OrderedJson::parse(R"([{"role": "user", "content": "  Please review this:\n"},
        {"role": "assistant", "content": "It reads well"}])");
    const std::string rendered = chat.render(inputs);
    // The user's own mask needs the user's text as written.
    if (rendered.find("  Please review this:\n") == std::string::npos) {
      CHECK_THROWS_WITH(chat::locate_contents(chat, inputs, rendered, TokenMask::kUser),
                        doctest::Contains("messages[0] (user): its content"));
    }
  }
}

TEST_CASE("last-assistant reads nothing of earlier replies when the last assistant message has no text") {
  const std::string dir = tokenizer_dir("gemma3");
  const tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::from_file(dir + "/tokenizer.json");
  const chat::OrderedJson messages = chat::OrderedJson::parse(R"([{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Yes"}, {"role": "user", "content": "Go on"}, {"role": "assistant", "content": ""}])");
  const std::string rendered = chat::render_conversation(dir, messages, false);
  const std::vector<int32_t> ids = tokenizer.encode(rendered, false);
  // Regression: the last assistant message with text ("Yes") was read in its place.
  const std::vector<uint8_t> last =
      chat::token_mask(tokenizer.token_spans(ids, rendered), chat::content_spans(messages, rendered), TokenMask::kLastAssistant);
  CHECK(std::count(last.begin(), last.end(), 1) == 0);
}

TEST_CASE("regression: a rewritten content quoted in the error is cut at a character's start, not inside one") {
  // The quote was the content's first 60 bytes, serialized strictly: a character across byte 60 made the serializer
  // throw its own invalid UTF-8 error in place of the message naming the message.
  const std::string dir = tokenizer_dir("qwen3");
  const std::string content = "<think>\n" + std::string(51, 'a') + "日本</think>\n\nshown";
  chat::OrderedJson messages = chat::OrderedJson::array();
  messages.push_back({{"role", "user"}, {"content", "Hi"}});
  messages.push_back({{"role", "assistant"}, {"content", content}});
  messages.push_back({{"role", "user"}, {"content", "Next"}});
  const std::string rendered = chat::render_conversation(dir, messages, false);
  const std::string quoted = "messages[1] (assistant): its content \"<think>\\n" + std::string(51, 'a') + "\" is not";
  CHECK_THROWS_WITH(chat::content_spans(messages, rendered), doctest::Contains(quoted.c_str()));
}

TEST_CASE("token spans: every token's bytes in the text, one after the other; a rewritten text is refused") {
  const tokenizer::Tokenizer gemma = tokenizer::Tokenizer::from_file(tokenizer_dir("gemma3") + "/tokenizer.json");
  const std::string text = "<bos>Café 日本 🤖 a  b\n";
  const std::vector<int32_t> ids = gemma.encode(text, false);
  const auto spans = gemma.token_spans(ids, text);
  REQUIRE(spans.size() == ids.size());
  CHECK(spans.front() == std::pair<size_t, size_t>(0, 5));
  CHECK(spans.back().second == text.size());
  for (size_t t = 1; t < spans.size(); ++t) CHECK(spans[t].first == spans[t - 1].second);
  CHECK_THROWS_WITH(gemma.token_spans(ids, text + "x"), doctest::Contains("spell"));
  const tokenizer::Tokenizer qwen = tokenizer::Tokenizer::from_file(tokenizer_dir("qwen3") + "/tokenizer.json");
  // NFC rewrites a decomposed accent: its tokens spell the composed one.
  const std::string decomposed = "Cafe\xCC\x81";
  CHECK_THROWS_WITH(qwen.token_spans(qwen.encode(decomposed, false), decomposed),
                    doctest::Contains("does not spell the text at byte"));
}

TEST_CASE("regression: a byte token that does not spell the text is named in the error, not a serializer's failure") {
  // The token's bytes were serialized strictly: a lone byte of a character made the serializer throw its own error.
  const tokenizer::Tokenizer gemma = tokenizer::Tokenizer::from_file(tokenizer_dir("gemma3") + "/tokenizer.json");
  const std::optional<int32_t> byte_token = gemma.token_to_id("<0xE6>");
  REQUIRE(byte_token.has_value());
  CHECK_THROWS_WITH(gemma.token_spans({*byte_token}, "x"), doctest::Contains("does not spell the text at byte 0"));
}

TEST_CASE("token spans of SentencePiece tokenizers: the prepended space is not in the text, byte tokens are bytes") {
  for (const char* name : {"spm_llama2", "spm_gemma", "bytelevel_gpt2"}) {
    INFO(name);
    const tokenizer::Tokenizer tok =
        tokenizer::Tokenizer::from_file(std::string(PROBEKIT_FIXTURES) + "/tokenizers/" + name + "/tokenizer.json");
    const std::string text = "Hello world, café 日本 ok";
    const std::vector<int32_t> ids = tok.encode(text, false);
    const auto spans = tok.token_spans(ids, text);
    REQUIRE(spans.size() == ids.size());
    CHECK(spans.front().first == 0);
    CHECK(spans.back().second == text.size());
    for (size_t t = 1; t < spans.size(); ++t) CHECK(spans[t].first == spans[t - 1].second);
  }
}
