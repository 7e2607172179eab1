// Probes scored on a second capture: production monitors are judged by how they generalise (longer conversations,
// another distribution), so train_binary_probes --eval-file scores each layer's probes on that capture's file of the
// layer and writes eval_metrics.json beside the test split's metrics, with the same figures.
#pragma once

#include <cstdint>
#include <string>

#include "common/json.h"

namespace probekit::probes {

/// Scores the binary probes of one layer's directory `dir` on every example of `eval_file` (read as the probes'
/// activations were: refused otherwise, naming the field), each probe on the examples of its label by name:
/// AUROC, average precision, recall at 1% and 5% false-positive rate, with 95% bootstrap intervals (`seed`).
/// Writes `dir`/eval_metrics.json and returns it.
Json evaluate_layer(const std::string& dir, const std::string& eval_file, uint64_t seed);

}  // namespace probekit::probes
