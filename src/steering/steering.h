// Steering: vectors added to the residual stream (and directions projected out of it) at decoder layers' outputs,
// from probes, vector files or a request's values, as the tools' flags and the server's requests name them. A spec
// is a list of operations (action, source, layers, coefficient); resolving it against a model gives the vectors,
// checked (layer in range, width the hidden size) and recorded in every output; placing them gives the model's
// stream writes (model/stream_writes.h).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/json.h"
#include "model/config.h"
#include "model/stream_writes.h"
#include "model/transformer.h"
#include "sae/sae.h"

namespace probekit::steering {

/// What an operation does at its layers' outputs.
enum class SteeringAction {
  kAdd,     // add coefficient times the vector
  kAblate,  // project the direction (the vector, normalized) out: h - (h.u)u
  kClamp,   // set an SAE latent to the coefficient, adding the reconstruction's change (value - z_i) W_dec[i]
};

/// Where an operation's vectors come from.
enum class SteeringSource {
  kProbe,   // a label's probe direction (unit length) at each layer, from the spec's probes directory
  kFile,    // each layer's vector of a .safetensors (layer.{L}) or GGUF control vector (direction.{L}) file
  kVector,  // values given in a request, [hidden]
  kLatent,  // an SAE latent's decoder row as stored (not normalised), at the SAE's site and layer
};

/// One steering operation, as a flag or a request's item gives it.
struct SteeringOp {
  SteeringAction action = SteeringAction::kAdd;
  SteeringSource source = SteeringSource::kProbe;
  std::string label;          // kProbe
  std::string path;           // kFile
  std::vector<float> vector;  // kVector
  std::string sae;            // kLatent: the SAE's name (--sae NAME=PATH)
  int64_t latent = -1;        // kLatent
  std::string layers;         // as --layers takes them (8,17, 21-30, all); empty for a file: each layer it has
  double coefficient = 1;     // kAdd
  bool from_flag = false;     // given as a flag (--steer, --ablate, --steer-latent, --clamp-latent: messages name it),
                              // not by a request or a monitor

  /// --steer LABEL@LAYER=COEF, --ablate LABEL@LAYERS, --steer-vector FILE[=COEF], --ablate-vector FILE, and a
  /// request's {"vector", "layer", "coefficient"}.
  static SteeringOp probe(SteeringAction action, std::string label, std::string layers, double coefficient = 1);
  static SteeringOp file(SteeringAction action, std::string path, double coefficient = 1);
  static SteeringOp given(SteeringAction action, std::vector<float> vector, int64_t layer, double coefficient = 1);
  /// --steer-latent NAME:INDEX=COEF (kAdd), --clamp-latent NAME:INDEX=VALUE (kClamp).
  static SteeringOp sae_latent(SteeringAction action, std::string sae, int64_t latent, double coefficient);
};

/// What to steer with: operations applied in order, and where their labels' probes are.
struct SteeringSpec {
  std::vector<SteeringOp> ops;
  std::string probes_dir;

  bool empty() const { return ops.empty(); }
  /// Whether an operation names a label (and so needs a probes directory).
  bool needs_probes() const;
};

/// The largest coefficient a steering operation takes (the server's bound too): past it a unit direction swamps the
/// residual stream of any model, whose numbers then overflow in fp16 and bf16.
constexpr double kMaxSteeringCoefficient = 1e6;
/// The largest norm an added vector may have once scaled by its coefficient: past it the next norm's squares
/// overflow fp32 and bf16, and every token generated is garbage.
constexpr double kMaxSteeringNorm = 1e12;

/// Refuses a coefficient that is not finite or is past kMaxSteeringCoefficient, naming `where` (the flag and value)
/// with a UsageError.
void check_coefficient(double coefficient, const std::string& where);

/// Parses --steer's LABEL@LAYER=COEF, --steer-vector's FILE[=COEF] and --ablate's LABEL@LAYERS (8,17 or 21-30);
/// a malformed value is a usage error naming the flag.
SteeringOp parse_probe_addition(const std::string& text);
SteeringOp parse_file_addition(const std::string& text);
SteeringOp parse_probe_ablation(const std::string& text);
/// Parses --steer-latent's and --clamp-latent's NAME:INDEX=VALUE (`action` kAdd or kClamp).
SteeringOp parse_latent_op(const std::string& text, SteeringAction action);

/// The vectors of a spec, in one layer's space each, on the host in fp32.
struct SteeringVectors {
  struct Addition {
    int64_t layer = 0;
    at::Tensor vector;  // [hidden], the coefficient not applied
    double coefficient = 0;
    Json source;        // what it came from: {"label", "probes"} or {"file"} or {"vector"} or {"sae", "latent"}
    Site site = Site::kResidPost;  // an SAE latent's: the SAE's site
  };
  struct Ablation {
    int64_t layer = 0;
    at::Tensor unit;  // [hidden], unit length
    Json source;
  };
  struct Clamp {
    std::shared_ptr<const sae::SparseAutoencoder> sae;  // on the host; its site and layer are where it writes
    int64_t latent = 0;
    double value = 0;
    Json source;  // {"sae", "latent"}
  };
  std::vector<Addition> additions;
  std::vector<Ablation> ablations;
  std::vector<Clamp> clamps;

  bool empty() const { return additions.empty() && ablations.empty() && clamps.empty(); }
  /// Whether a clamp sets latent `latent` of the SAE named `sae`.
  bool clamps_latent(const std::string& sae, int64_t latent) const;
  /// Adds `clamp` in place of any clamp of the same latent: two would add both changes.
  void replace_clamp(const Clamp& clamp);
  /// What was applied, as the JSON outputs record it: {"add": [{layer, coefficient, norm, source}], "ablate": [...]},
  /// and "clamp": [{layer, site, value, source}] where latents are clamped.
  Json record() const;
};

/// Resolves a spec for a model of `config`: probe directions (unit length) from `spec.probes_dir`, files' vectors,
/// request vectors. A layer out of range, a vector of another width, a label without a probe at that layer, a
/// probe kind without a direction: each an error naming it (std::invalid_argument).
/// Latent operations name SAEs among `saes` (--sae).
SteeringVectors resolve(const SteeringSpec& spec, const model::ModelConfig& config,
                        const std::vector<sae::SparseAutoencoder>& saes = {});

/// The stream writes of `vectors` for `model`: one addition per layer (the sum of coefficient * vector) and the
/// ablations, in fp32 on each layer's device. Additions with coefficient 0 are left out (no steering, bitwise).
model::StreamWrites place(const SteeringVectors& vectors, const model::TransformerModel& model);

/// The stream writes of a batch whose rows steer differently: row b's vectors as [B, hidden] tensors (zeros where
/// a row adds nothing; a zero direction where it ablates nothing, which projects out nothing).
model::StreamWrites place_rows(const std::vector<const SteeringVectors*>& rows, const model::TransformerModel& model);

}  // namespace probekit::steering
