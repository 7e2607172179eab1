// The pattern of Split, Replace and the Replace decoder, read from its tokenizer.json node. It lives beside
// regex.h and json_node.h because the normalizer, pre-tokenizer and decoder factories all read it.
#pragma once

#include "tokenizer/json_node.h"
#include "tokenizer/regex.h"

namespace probekit::tokenizer {

/// Reads {"String": "..."} or {"Regex": "..."}; a regex that does not compile fails at its place in the file.
Pattern read_pattern(const JsonNode& node);

}  // namespace probekit::tokenizer
