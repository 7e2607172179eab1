// What the request-body targets share: probe_server refuses a body with a RequestError carrying a 4xx status and a
// short message; any other exception would reach the client as a 500.
#pragma once

#include <exception>
#include <string>

#include "fuzz_util.h"
#include "server/api/requests.h"

namespace probekit::fuzz {

/// Runs `parse` over a request body; returns whether it accepted the body, and finds any refusal that is not a
/// RequestError with a 4xx status and a message that quotes the body's values cut short.
template <typename Parse>
bool parses_or_refuses_with_4xx(Parse&& parse) {
  try {
    parse();
    return true;
  } catch (const server::RequestError& e) {
    if (e.status() < 400 || e.status() > 499) finding("a refusal without a 4xx status");
    if (std::string(e.what()).empty()) finding("a refusal without a message");
    // A message quotes values cut short, however long or deep the body.
    if (std::string(e.what()).size() > 1000 || e.field().size() > 200) finding("a refusal that quotes too much");
  } catch (const std::exception& e) {
    finding(std::string("a body refused without a RequestError: ") + e.what());
  }
  return false;
}

}  // namespace probekit::fuzz
