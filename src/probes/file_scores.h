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

/// Refuses the file at `path`, read with `recipe`, when it was read otherwise than the probes in `dir` (another
/// site, mask, template, model, ...), naming the field; `use` says what the file was given for ("the calibration data").
void check_read_alike(const ProbeSet& set, const std::string& dir, const activations::ReadoutRecipe& recipe,
                      const std::string& path, const std::string& use);

/// The layer file of `capture` (a directory of layer files, or one file) for `layer`; an error naming `flag` and
/// the layer when it has none.
std::string layer_file_of(const std::string& capture, int64_t layer, const std::string& flag);

/// The binary probes of one layer's directory and their logits on every example of a file read alike (checked).
struct LayerFileScores {
  ProbeSet set;
  activations::ActivationFile file;
  at::Tensor logits;  // [examples, K] doubles on the CPU
  // With token maxima asked for: token_stream_maxima [examples, K], undefined where the file has none, and why not.
  at::Tensor token_maxima;
  std::string no_token_maxima;
};

/// Loads the binary probes of `dir` (a multiclass probe is refused: `why_binary` says why it must be binary), reads
/// `path`, refuses it when read otherwise than the probes' activations (`use` names it) and scores it; with
/// `token_maxima`, also each example's highest per-token score where the file holds them (token_streams.h). A
/// --position all capture serves probes of position last: each text's last row is the row theirs held.
LayerFileScores score_layer_file(const std::string& dir, const std::string& path, const std::string& use,
                                 const std::string& why_binary, bool token_maxima = false);

/// Every example's label index in `file` (train, val, test in that order).
std::vector<int64_t> file_labels(const activations::ActivationFile& file);

}  // namespace probekit::probes
