// Which token positions of a text become rows where a site is read (the readout's --position), and which tokens of a
// conversation are read at all (--mask): both recorded in every activation file and probe index
// (activations/readout_recipe.h).
#pragma once

#include <optional>
#include <string>

namespace probekit {

/// Which token positions become rows: the last token, the mean or max over the text's tokens, or every token.
enum class Position { kLast, kMean, kMax, kAll };

/// The position of a name, if one has it.
std::optional<Position> find_position(const std::string& name);
/// Parses --position; an unknown name is a usage error listing the positions.
Position parse_position(const std::string& name);
/// The position's name, as --position takes it.
std::string position_name(Position position);

/// Which tokens of a conversation are read (--mask): those overlapping the content of the assistant's messages, of
/// the user's, of the last assistant message only, or every token. A plain text reads every token (kAll).
enum class TokenMask { kAssistant, kUser, kLastAssistant, kAll };

/// The mask of a name (assistant, user, last-assistant, all), if one has it.
std::optional<TokenMask> find_token_mask(const std::string& name);
/// Parses --mask; an unknown name is a usage error listing the masks.
TokenMask parse_token_mask(const std::string& name);
std::string token_mask_name(TokenMask mask);

}  // namespace probekit
