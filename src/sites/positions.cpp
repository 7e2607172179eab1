#include "sites/positions.h"

#include "common/error.h"

namespace probekit {

std::optional<Position> find_position(const std::string& name) {
  for (Position position : {Position::kLast, Position::kMean, Position::kMax, Position::kAll}) {
    if (name == position_name(position)) return position;
  }
  return std::nullopt;
}

Position parse_position(const std::string& name) {
  std::optional<Position> position = find_position(name);
  if (!position) fail_usage("--position {}: expected last, mean, max or all", name);
  return *position;
}

std::string position_name(Position position) {
  switch (position) {
    case Position::kLast: return "last";
    case Position::kMean: return "mean";
    case Position::kMax: return "max";
    case Position::kAll: return "all";
  }
  return "?";
}

std::optional<TokenMask> find_token_mask(const std::string& name) {
  for (TokenMask mask : {TokenMask::kAssistant, TokenMask::kUser, TokenMask::kLastAssistant, TokenMask::kAll}) {
    if (name == token_mask_name(mask)) return mask;
  }
  return std::nullopt;
}

TokenMask parse_token_mask(const std::string& name) {
  std::optional<TokenMask> mask = find_token_mask(name);
  if (!mask) fail_usage("--mask {}: expected assistant, user, last-assistant or all", name);
  return *mask;
}

std::string token_mask_name(TokenMask mask) {
  switch (mask) {
    case TokenMask::kAssistant: return "assistant";
    case TokenMask::kUser: return "user";
    case TokenMask::kLastAssistant: return "last-assistant";
    case TokenMask::kAll: return "all";
  }
  return "?";
}

}  // namespace probekit
