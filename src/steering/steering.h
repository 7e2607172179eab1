// Steering: vectors added to the residual stream (and directions projected out of it) at decoder layers' outputs,
// from probes or vector files, as the tools' flags and the server's requests name them. A spec says what was asked
// (labels, files, coefficients); resolving it against a model gives the vectors, checked (layer in range, width the
// hidden size) and recorded in every output; placing them gives the model's stream writes (model/stream_writes.h).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "model/config.h"
#include "model/stream_writes.h"
#include "model/transformer.h"

namespace probekit::steering {

/// What to steer with, as the flags or a request say it.
struct SteeringSpec {
  struct ProbeAddition {  // --steer LABEL@LAYER=COEF: the label's probe direction at that layer
    std::string label;
    int64_t layer = 0;
    double coefficient = 0;
  };
  struct FileAddition {  // --steer-vector FILE[=COEF]: each layer's vector of the file
    std::string path;
    double coefficient = 1;
  };
  struct VectorAddition {  // a request's vector: {"vector": [...], "layer": L, "coefficient": c}
    std::vector<float> vector;
    int64_t layer = 0;
    double coefficient = 1;
  };
  struct ProbeAblation {  // --ablate LABEL@LAYERS: the label's direction projected out at those layers
    std::string label;
    std::string layers;  // as --layers takes them: 8,17, 21-30 or all
  };
  std::vector<ProbeAddition> probe_additions;
  std::vector<FileAddition> file_additions;
  std::vector<VectorAddition> vector_additions;
  std::vector<ProbeAblation> probe_ablations;
  std::vector<std::string> file_ablations;  // --ablate-vector FILE: each layer's vector (normalized) projected out
  std::vector<VectorAddition> vector_ablations;  // a request's {"vector", "layer"} to project out (normalized)
  std::string probes_dir;                   // where the labels' probes are

  bool empty() const;
  /// Whether the spec names labels (and so needs a probes directory).
  bool needs_probes() const;
};

/// Parses --steer's LABEL@LAYER=COEF, --steer-vector's FILE[=COEF] and --ablate's LABEL@LAYERS (8,17 or 21-30);
/// a malformed value is a usage error naming the flag.
SteeringSpec::ProbeAddition parse_probe_addition(const std::string& text);
SteeringSpec::FileAddition parse_file_addition(const std::string& text);
SteeringSpec::ProbeAblation parse_probe_ablation(const std::string& text);

/// The vectors of a spec, in one layer's space each, on the host in fp32.
struct SteeringVectors {
  struct Addition {
    int64_t layer = 0;
    at::Tensor vector;  // [hidden], the coefficient not applied
    double coefficient = 0;
    Json source;        // what it came from: {"label", "probes"} or {"file"} or {"vector"}
  };
  struct Ablation {
    int64_t layer = 0;
    at::Tensor unit;  // [hidden], unit length
    Json source;
  };
  std::vector<Addition> additions;
  std::vector<Ablation> ablations;

  bool empty() const { return additions.empty() && ablations.empty(); }
  /// What was applied, as the JSON outputs record it: {"add": [{layer, coefficient, norm, source}], "ablate": [...]}.
  Json record() const;
};

/// Resolves a spec for a model of `config`: probe directions (unit length) from `spec.probes_dir`, files' vectors,
/// request vectors. A layer out of range, a vector of another width, a label without a probe at that layer, a
/// probe kind without a direction: each an error naming it (std::invalid_argument).
SteeringVectors resolve(const SteeringSpec& spec, const model::ModelConfig& config);

/// The stream writes of `vectors` for `model`: one addition per layer (the sum of coefficient * vector) and the
/// ablations, in fp32 on each layer's device. Additions with coefficient 0 are left out (no steering, bitwise).
model::StreamWrites place(const SteeringVectors& vectors, const model::TransformerModel& model);

/// The stream writes of a batch whose rows steer differently: row b's vectors as [B, hidden] tensors (zeros where
/// a row adds nothing; a zero direction where it ablates nothing, which projects out nothing).
model::StreamWrites place_rows(const std::vector<const SteeringVectors*>& rows, const model::TransformerModel& model);

}  // namespace probekit::steering
