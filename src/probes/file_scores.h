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

/// The binary probes of one layer's directory and their logits on every example of a file read alike (checked).
struct LayerFileScores {
  ProbeSet set;
  activations::ActivationFile file;
  at::Tensor logits;  // [examples, K] doubles on the CPU
};

/// Loads the binary probes of `dir` (a multiclass probe is refused: `why_binary` says why it must be binary), reads
/// `path`, refuses it when read otherwise than the probes' activations (`use` names it) and scores it.
LayerFileScores score_layer_file(const std::string& dir, const std::string& path, const std::string& use,
                                 const std::string& why_binary);

/// Every example's label index in `file` (train, val, test in that order).
std::vector<int64_t> file_labels(const activations::ActivationFile& file);

}  // namespace probekit::probes
