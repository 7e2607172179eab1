// The fluency cost of steering: how far each step's next-token distribution moved from the unsteered model's on the
// same text (KL(steered || unsteered), in nats), and how likely the unsteered model finds the steered text
// (perplexity: exp of the mean negative log-probability of the generated tokens). Both are measured by teacher
// forcing the generated tokens through the model with and without the row's steering.
#pragma once

#include <vector>

#include "model/transformer.h"
#include "readout/readout.h"
#include "steering/steering.h"

namespace probekit::sweep {

struct Fluency {
  std::vector<double> kl;  // per generated token
  double kl_mean = 0;
  double perplexity = 0;  // of the generated tokens under the unsteered model
};

/// The fluency of each row: its prompt and generated ids, its steering (null: none, whose KL is 0), `rows_per_pass`
/// rows through the model at a time.
std::vector<Fluency> measure_fluency(const model::TransformerModel& model, const std::vector<readout::Sequence>& prompts,
                                     const std::vector<readout::Sequence>& generated,
                                     const std::vector<const steering::SteeringVectors*>& steering, size_t rows_per_pass);

}  // namespace probekit::sweep
