// probe_server's request bodies: any bytes as the JSON body of POST /v1/rank, /v1/per-token or /v1/generate (the
// first byte picks the endpoint, whether the bounds are tight or the defaults, and whether the body is nested
// inside up to 102,000 arrays, as the whole body or as a field's value: the second byte says how deep). A body is
// refused with a RequestError carrying a 4xx status and a message of bounded length (any other exception would
// reach the client as a 500; a stack overflow on deep nesting is a crash), or accepted keeping the bounds: no
// more texts than --max-texts, no empty text, values inside their ranges, no nesting past kMaxJsonDepth.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "request_refusal.h"
#include "server/api/requests.h"

using namespace probekit;

namespace {

void check_view(const server::ViewQuery& view) {
  if (view.top_k < 1) fuzz::finding("an accepted top_k is below 1");
  if (!(view.threshold >= 0 && view.threshold <= 1)) fuzz::finding("an accepted threshold is outside [0, 1]");
  if (view.mode != "all" && view.mode != "by-action" && view.mode != "by-layer") fuzz::finding("an unknown mode was accepted");
  if (view.aggregate != "max" && view.aggregate != "mean") fuzz::finding("an unknown aggregate was accepted");
}

void check_text(const std::string& text) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) fuzz::finding("an empty text was accepted");
}

// `body` inside `levels` arrays, or as the value of 'texts' inside them.
std::string nested(std::string_view body, size_t levels, bool as_field) {
  std::string inner = std::string(levels, '[') + std::string(body) + std::string(levels, ']');
  return as_field ? "{\"texts\": " + inner + "}" : inner;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string deep;
  bool too_deep = false;
  if ((data[0] & 8) != 0 && size >= 2) {
    const size_t levels = static_cast<size_t>(data[1]) * 400;
    const bool as_field = (data[0] & 16) != 0;
    deep = nested(body.substr(1), levels, as_field);
    body = deep;
    // The wrapping's brackets come first, so the body is that deep whatever it holds.
    too_deep = levels + (as_field ? 1 : 0) > static_cast<size_t>(server::kMaxJsonDepth);
  }
  // Whatever the endpoint, a body nested past the bound is refused before anything reads it.
  try {
    if (too_deep) {
      server::parse_rank_query(body, server::Limits());
      fuzz::finding("a body nested past kMaxJsonDepth was accepted");
    }
  } catch (const server::RequestError& e) {
    if (std::string(e.what()).find("levels deep") == std::string::npos) fuzz::finding("a deep body refused for another reason");
  }
  server::Limits limits;
  if (data[0] & 4) {
    limits.max_texts = 2;
    limits.max_new_tokens = 3;
  }
  switch (data[0] % 4) {
    case 0:
    case 1:
      fuzz::parses_or_refuses_with_4xx([&] {
        server::RankQuery q = server::parse_rank_query(body, limits);
        if (q.texts.empty() || static_cast<int64_t>(q.texts.size()) > limits.max_texts) fuzz::finding("texts past --max-texts");
        for (const std::string& text : q.texts) check_text(text);
        check_view(q.view);
      });
      break;
    case 2:
      fuzz::parses_or_refuses_with_4xx([&] {
        server::PerTokenQuery q = server::parse_per_token_query(body, limits);
        check_text(q.text);
        check_view(q.view);
      });
      break;
    default:
      fuzz::parses_or_refuses_with_4xx([&] {
        server::GenerateQuery q = server::parse_generate_query(body, limits);
        check_text(q.prompt);
        check_view(q.view);
        if (q.max_new_tokens < 1 || q.max_new_tokens > limits.max_new_tokens) fuzz::finding("max_new_tokens past its bound");
        if (!(q.temperature >= 0) || !(q.top_p >= 0 && q.top_p <= 1)) fuzz::finding("a sampling value out of range");
      });
      break;
  }
  return 0;
}
