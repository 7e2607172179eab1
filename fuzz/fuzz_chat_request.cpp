// probe_server's POST /v1/chat/completions and the conversations it renders: the bytes after the first as the body,
// parsed by parse_chat_query; an accepted body's messages (and tools) rendered by a checkpoint's chat template as the
// server renders a prompt, tokenized by that checkpoint's tokenizer, and masked by role as capture's --mask and
// /v1/rank's "messages" mask them. The first byte: bits 0-2 pick the checkpoint (the fixture's Gemma 3, then the real
// templates and tokenizers of .cache/tokenizers where scripts/fetch_tokenizers.sh put them), bit 3 tight bounds,
// bit 4 no generation prompt, bit 5 the bytes as a conversation's turns rather than a body. A refusal is a RequestError with a 4xx status while parsing, a std::invalid_argument
// (TemplateError, TemplateRaised, RenderBudgetExceeded) while rendering (the server answers both with a 4xx; anything
// else would be a 500), and a clean refusal while masking; an accepted body keeps its bounds, a render its sandbox's,
// and each mask holds one flag a token, set exactly where the token overlaps a content of the mask's role.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "chat/token_masks.h"
#include "common/files.h"
#include "common/json.h"
#include "fuzz_util.h"
#include "render_bounds.h"
#include "request_refusal.h"
#include "server/api/chat_request.h"
#include "tokenizer/tokenizer.h"

using namespace probekit;

namespace {

struct Checkpoint {
  chat::ChatTemplate chat;
  tokenizer::Tokenizer tokenizer;
};

const std::vector<Checkpoint>& checkpoints() {
  static const std::vector<Checkpoint> loaded = [] {
    std::vector<std::string> dirs{std::string(PROBEKIT_FIXTURES) + "/models/gemma3_text"};
    for (const char* name : {"gemma3", "llama3", "qwen3", "deepseek_v3"}) {
      const std::string dir = std::string(PROBEKIT_FIXTURES) + "/../../.cache/tokenizers/" + name;
      if (path_exists(dir + "/tokenizer_config.json")) dirs.push_back(dir);
    }
    std::vector<Checkpoint> out;
    for (const std::string& dir : dirs) {
      out.push_back(Checkpoint{chat::ChatTemplate::from_tokenizer_dir(dir), tokenizer::Tokenizer::from_file(dir)});
    }
    return out;
  }();
  return loaded;
}

void check_accepted(const server::ChatQuery& query, const server::Limits& limits) {
  if (!query.messages.is_array() || query.messages.empty()) fuzz::finding("accepted messages that are not a non-empty list");
  if (query.max_tokens < 1 || query.max_tokens > limits.max_new_tokens) fuzz::finding("an accepted max_tokens out of bounds");
  if (!(query.temperature >= 0 && query.temperature <= 2)) fuzz::finding("an accepted temperature outside [0, 2]");
  if (!(query.top_p > 0 && query.top_p <= 1)) fuzz::finding("an accepted top_p outside (0, 1]");
  if (static_cast<int64_t>(query.stop.size()) > server::kMaxStopStrings) fuzz::finding("more stop strings accepted than allowed");
  for (const std::string& stop : query.stop) {
    if (stop.empty()) fuzz::finding("an empty stop string was accepted");
  }
  if (!query.monitors.is_null() && !query.monitors.is_array()) fuzz::finding("accepted monitors that are not a list");
}

// The server's render (server/chat_completions.cpp): refusals are std::invalid_argument, answered with a 4xx.
bool render(const Checkpoint& checkpoint, chat::ChatTemplateInputs& inputs, std::string& rendered) {
  chat::RenderUsage usage;
  try {
    rendered = checkpoint.chat.render(inputs, &usage);
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).empty()) fuzz::finding("a render refused without a message");
    return false;
  } catch (const std::exception& e) {
    fuzz::finding(std::string("a render failed with an exception the server answers with a 500: ") + e.what());
  }
  fuzz::check_render_within_bounds(rendered, usage, inputs.limits);
  return true;
}

bool overlaps(const std::pair<size_t, size_t>& token, const chat::ContentSpan& content) {
  return token.first < content.end && content.begin < token.second;
}

// Each mask against its definition, computed here from the spans alone.
void check_masks(const std::vector<std::pair<size_t, size_t>>& tokens, const std::vector<chat::ContentSpan>& contents,
                 const std::string& rendered) {
  size_t last_assistant = 0;
  for (const chat::ContentSpan& content : contents) {
    if (content.begin >= content.end || content.end > rendered.size()) fuzz::finding("a content span outside the render");
    if (content.role == "assistant") last_assistant = content.message;
  }
  for (TokenMask mask : {TokenMask::kAssistant, TokenMask::kUser, TokenMask::kLastAssistant, TokenMask::kAll}) {
    const std::vector<uint8_t> flags = chat::token_mask(tokens, contents, mask);
    if (flags.size() != tokens.size()) fuzz::finding("a mask without one flag a token");
    for (size_t t = 0; t < tokens.size(); ++t) {
      bool expected = mask == TokenMask::kAll;
      for (const chat::ContentSpan& content : contents) {
        const bool read = mask == TokenMask::kUser ? content.role == "user"
                          : mask == TokenMask::kAssistant ? content.role == "assistant"
                          : content.role == "assistant" && content.message == last_assistant;
        expected = expected || (read && overlaps(tokens[t], content));
      }
      if (flags[t] != (expected ? 1 : 0)) fuzz::finding("a token's mask flag is not its overlap with the role's contents");
    }
  }
}

// A conversation whose turns are `text` split at its \x01 bytes: user, assistant, user, ... (not UTF-8: U+FFFD), so
// that mutations reach the render, the tokens and the masks rather than the JSON syntax.
std::string conversation_body(std::string_view text) {
  Json messages = Json::array();
  for (size_t begin = 0, turn = 0; begin <= text.size(); ++turn) {
    const size_t end = std::min(text.find('\x01', begin), text.size());
    messages.push_back({{"role", turn % 2 == 0 ? "user" : "assistant"}, {"content", std::string(text.substr(begin, end - begin))}});
    begin = end + 1;
  }
  return dump_json(Json{{"messages", messages}});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t choice = data[0];
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string body = (choice & 32) != 0 ? conversation_body(bytes) : std::string(bytes);
  server::Limits limits;
  if ((choice & 8) != 0) limits.max_new_tokens = 4;
  server::ChatQuery query;
  if (!fuzz::parses_or_refuses_with_4xx([&] { query = server::parse_chat_query(body, limits); })) return 0;
  check_accepted(query, limits);

  const Checkpoint& checkpoint = checkpoints()[(choice & 7) % checkpoints().size()];
  chat::ChatTemplateInputs inputs;
  inputs.messages = chat::OrderedJson::parse(query.messages.dump());
  if (!query.tools.is_null()) inputs.tools = chat::OrderedJson::parse(query.tools.dump());
  inputs.add_generation_prompt = (choice & 16) == 0;
  if ((choice & 8) != 0) {
    inputs.limits.max_steps = 20000;
    inputs.limits.max_bytes = 1 << 16;
    inputs.limits.max_depth = 16;
  }
  std::string rendered;
  if (!render(checkpoint, inputs, rendered)) return 0;

  const std::vector<int32_t> ids = checkpoint.tokenizer.encode(rendered, false);
  std::vector<std::pair<size_t, size_t>> tokens;
  std::vector<chat::ContentSpan> contents;
  if (!fuzz::completes_or_refuses_cleanly([&] {
        tokens = checkpoint.tokenizer.token_spans(ids, rendered);
        contents = chat::content_spans(inputs.messages, rendered);
      })) {
    return 0;
  }
  check_masks(tokens, contents, rendered);
  return 0;
}
