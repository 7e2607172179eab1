// What the chat-template targets check of every render they accept: it kept within its sandbox's bounds.
#pragma once

#include <cstdint>
#include <string>

#include "chat/chat_template.h"
#include "fuzz_util.h"

namespace probekit::fuzz {

/// Finds a render longer than its byte budget, or one whose usage passed a bound of `limits` and was not refused.
inline void check_render_within_bounds(const std::string& rendered, const chat::RenderUsage& usage,
                                       const chat::RenderLimits& limits) {
  if (static_cast<int64_t>(rendered.size()) > limits.max_bytes) finding("a render longer than its byte budget");
  if (usage.steps > limits.max_steps || usage.bytes > limits.max_bytes || usage.deepest > limits.max_depth) {
    finding("a render that passed its bounds was accepted");
  }
}

}  // namespace probekit::fuzz
