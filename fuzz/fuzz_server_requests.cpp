// probe_server's request bodies: any bytes as the JSON body of POST /v1/rank, /v1/per-token or /v1/generate (the
// first byte picks the endpoint and whether the bounds are tight or the defaults). A body is refused with a
// RequestError carrying a 4xx status and a message (any other exception would reach the client as a 500), or
// accepted keeping the bounds: no more texts than --max-texts, no empty text, values inside their ranges.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
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

template <typename Parse>
void parse_or_refuse(Parse&& parse) {
  try {
    parse();
  } catch (const server::RequestError& e) {
    if (e.status() < 400 || e.status() > 499) fuzz::finding("a refusal without a 4xx status");
    if (std::string(e.what()).empty()) fuzz::finding("a refusal without a message");
  } catch (const std::exception& e) {
    fuzz::finding(std::string("a body refused without a RequestError: ") + e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  server::Limits limits;
  if (data[0] & 4) {
    limits.max_texts = 2;
    limits.max_new_tokens = 3;
  }
  switch (data[0] % 4) {
    case 0:
    case 1:
      parse_or_refuse([&] {
        server::RankQuery q = server::parse_rank_query(body, limits);
        if (q.texts.empty() || static_cast<int64_t>(q.texts.size()) > limits.max_texts) fuzz::finding("texts past --max-texts");
        for (const std::string& text : q.texts) check_text(text);
        check_view(q.view);
      });
      break;
    case 2:
      parse_or_refuse([&] {
        server::PerTokenQuery q = server::parse_per_token_query(body, limits);
        check_text(q.text);
        check_view(q.view);
      });
      break;
    default:
      parse_or_refuse([&] {
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
