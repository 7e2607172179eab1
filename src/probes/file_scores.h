// Probes of one layer run over a whole activation file (every split's examples): what calibration (a threshold on
// ordinary data) and evaluation on a second capture (--eval-file) score, after checking that the file was read as
// the probes' activations were.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "activations/activation_store.h"
#include "probes/probe_files.h"

namespace probekit::probes {

/// The logits [examples, K] of every example of `file` (train, val, test in that order) under `set`.
at::Tensor file_logits(const ProbeSet& set, const activations::ActivationFile& file);

/// Refuses `file` when it was read otherwise than the probes in `dir` (another site, mask, template, model, ...),
/// naming the field; `use` says what the file was given for ("the calibration data").
void check_read_alike(const ProbeSet& set, const std::string& dir, const activations::ActivationFile& file,
                      const std::string& use);

/// The layer file of `capture` (a directory of layer files, or one file) for `layer`; an error naming `flag` and
/// the layer when it has none.
std::string layer_file_of(const std::string& capture, int64_t layer, const std::string& flag);

/// Every example's label index in `file` (train, val, test in that order).
std::vector<int64_t> file_labels(const activations::ActivationFile& file);

}  // namespace probekit::probes
