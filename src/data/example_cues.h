// The word lists of the example generator (example_generator.h): for each of its 45 labels three sentences
// that show the label's cognitive action, and the neutral settings, fillers and domains texts are built from.
#pragma once

#include <array>
#include <cstddef>

namespace probekit::data {

/// A label and the sentences that show it.
struct LabelCues {
  const char* label;
  std::array<const char*, 3> cues;
};

/// The reference's 45 cognitive actions, most distinct first, so that a generator of the first N labels
/// gives the easiest N-way problem.
extern const std::array<LabelCues, 45> kExampleLabelCues;

/// First sentences: the situation a text starts in.
extern const std::array<const char*, 10> kExampleSettings;

/// The "domain" field of a generated example.
extern const std::array<const char*, 6> kExampleDomains;

/// Neutral sentences that pad a text to its drawn length.
extern const std::array<const char*, 8> kExampleFillers;

}  // namespace probekit::data
