// What makes one kind of probe, behind one interface: its parameters (named as the reference's module names them),
// its forward and backward passes over a bank of K probes, the layout of its dropout masks, what its files record of
// its shape, and whether it reads one row per text or every token of it. Each kind is one file in kinds/ and one row
// of the registry (kinds/registry.cpp).
//
// Most kinds train by the trainers' gradient steps (forward and backward over batches, AdamW, early stopping).
// A kind that fits_directly() is instead fitted on the whole train split at once by its own solver (fit()):
// the trainers call that in place of their epoch loop and evaluate the result as any other probe.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "probes/solvers/lbfgs.h"

namespace probekit::probes {

class ProbeBank;
class ProbeKind;
struct TokenLayout;
struct TrainActivations;

/// The kind named `name`; a usage error listing the kinds otherwise.
const ProbeKind& probe_kind(const std::string& name);
/// Every kind's name, in the registry's order; with `multiclass`, only the kinds train_probes trains.
std::vector<std::string> probe_kind_names(bool multiclass = false);

/// The architecture of every probe in a bank.
struct ProbeShape {
  const ProbeKind* kind = &probe_kind("linear");
  int64_t input_dim = 0;
  int64_t hidden_dim = 512;  // multihead only
  int64_t outputs = 1;       // 1 for a binary probe, the class count for a multiclass one
  int64_t heads = 8;         // multihead and attention
  double dropout = 0.1;
  // Every-token kinds (attention): the most rows of a text read, its last ones (0: all), and how many leading
  // special tokens (BOS) of each text are left out.
  int64_t max_tokens = 0;
  int64_t skip_leading = 0;
  // Monitor kinds: the ema probe's smoothing (--ema-alpha) and the rolling probe's window (--window-tokens).
  double ema_alpha = 0.1;
  int64_t window_tokens = 16;
  int64_t sparse_k = 16;  // sparse-logistic: the columns each probe keeps (--k)
};

/// The token rows of B texts as an every-token kind reads them: packed, text after text.
struct TokenBatch {
  at::Tensor rows;      // [R, H]
  at::Tensor position;  // [R], the bank's dtype: each row's index in its text as captured (0: the first token)
  at::Tensor text;      // [R] int64: the row's text in the batch, 0..B-1
  at::Tensor row_slot;  // [R] int64: text * longest + the row's index among its text's rows in the batch
  int64_t texts = 0;
  int64_t longest = 0;  // the most rows of one text
};

/// One parameter: its state-dict name in the reference's module and its shape for one probe.
struct ParameterSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // where its [K, ...] block starts in the flat buffer
  int64_t numel() const;
};

/// How a kind's dropout keep flags are laid out per example: `elementwise` columns each drawn on its own, then
/// `grouped` columns drawn once per group of `group_size` (one draw per attention head, repeated over its dims).
struct DropoutLayout {
  int64_t elementwise = 0;
  int64_t grouped = 0;
  int64_t group_size = 1;
  int64_t width() const { return elementwise + grouped; }
};

/// The train split as a kind that fits directly sees it.
struct FitData {
  at::Tensor inputs;      // [N, H] train activations, float32 on the training device
  at::Tensor targets;     // a binary bank: [N, K] 0/1 float64, column k probe k's label; multiclass: [N] int64 classes
  at::Tensor pos_weight;  // [K] float64: the weight of each binary probe's positives in its loss (1: none)
  double C = 1.0;         // inverse strength of the L2 penalty, as sklearn's C
  solvers::LbfgsOptions solver;

  /// The weight of each row in each binary problem, [N, K]: pos_weight on its positives, 1 elsewhere.
  at::Tensor sample_weights() const;
};

class ProbeKind {
 public:
  virtual ~ProbeKind() = default;

  /// The --model-type value and the files' model_type ("linear").
  virtual const char* name() const = 0;
  /// The reference's class name (BinaryLinearProbe for a binary one, LinearProbe for a multiclass one).
  virtual std::string reference_class(bool binary) const = 0;
  /// The training flags only this kind and some others read (--heads, --k; every-token kinds --max-tokens, kinds
  /// fitted by a solver --C): given to a run that trains no kind reading them, they are refused, not ignored.
  virtual std::vector<std::string> own_flags() const;
  /// Why the kind's own shape fields cannot make a probe of this kind (naming the flags that set them); empty
  /// when they can.
  virtual std::string shape_problem(const ProbeShape& shape) const;
  /// The parameters of one probe in the reference's state-dict order.
  virtual std::vector<ParameterSpec> parameters(const ProbeShape& shape) const = 0;
  /// The bound b of parameter `index`'s PyTorch default initialisation U(-b, b).
  virtual double initial_bound(const std::vector<ParameterSpec>& specs, size_t index) const;
  virtual DropoutLayout dropout_layout(const ProbeShape& shape) const = 0;
  /// Values per example and probe of an evaluation pass's largest intermediate (to size its row chunks).
  virtual int64_t evaluation_width(const ProbeShape& shape) const = 0;
  /// The forward pass of a batch [B, H] with dropout masks already scaled (0 or 1/(1-p)); undefined to evaluate
  /// (no dropout: no backward follows).
  virtual TrainActivations forward(const ProbeBank& bank, const at::Tensor& input, const at::Tensor& masks) const = 0;
  /// Writes into `grads` (the bank's parameters' gradient views) the gradient of sum(grad_logits * logits).
  virtual void backward(const ProbeBank& bank, const TrainActivations& saved, const at::Tensor& grad_logits,
                        std::vector<at::Tensor>& grads) const = 0;
  /// Adds the kind's own shape fields to a probes.json index or a file's model_config (hidden_dim, num_heads).
  virtual void describe(const ProbeShape& shape, Json& fields) const;
  /// Reads them back from an index into `shape`.
  virtual void read_shape(const Json& index, const std::string& where, ProbeShape& shape) const;
  /// True for a kind that reads every token of a text (its activations captured with --position all).
  virtual bool reads_every_token() const { return false; }
  /// An every-token kind's forward pass over the rows of a batch of texts: logits [B, K, O] (eval and training
  /// alike: such a kind has no dropout). The others throw std::logic_error.
  virtual TrainActivations forward_tokens(const ProbeBank& bank, const TokenBatch& batch) const;
  /// Where an every-token kind's attention is in the intermediates of forward_tokens(): [R, K, heads] weights.
  virtual at::Tensor token_weights(const ProbeBank& bank, const TrainActivations& saved) const;
  /// Each row's own logit [R, K*O] of rows [R, H], for an every-token kind whose text logit aggregates per-token
  /// scores (ema, rolling: the linear score w . x + b it weighs); undefined for a kind without such scores.
  virtual at::Tensor row_logits(const ProbeBank& bank, const at::Tensor& rows) const;
  /// An every-token kind's logits [P, K, O] of the texts of `prefixes` (prefix_layout's: each text cut after each row
  /// it reads), rows from `values`: what it scores token by token as a text grows. By default token_logits over
  /// them, whose work grows with the square of a text's length; a kind may keep a running state instead.
  virtual at::Tensor prefix_logits(const ProbeBank& bank, const at::Tensor& values, const TokenLayout& prefixes) const;
  /// --heads when not given: the kind's own default.
  virtual int64_t default_heads() const { return 8; }
  /// The unit direction [H] (fp32, on the bank's device) in the layer's space along which output `output` of probe
  /// `probe` grows: a binary probe's weight; a class's weight row minus the mean of the rows (what the softmax
  /// compares). Throws, saying why, for a kind that has none (steering reads it).
  virtual at::Tensor direction(const ProbeBank& bank, int64_t probe, int64_t output) const;
  /// True for a kind fitted on the whole train split by fit(), not trained by gradient steps.
  virtual bool fits_directly() const { return false; }
  /// Fits every probe of `bank` (whose shape it is) to `data`; returns how each probe's solver ended. Only for a
  /// kind that fits_directly(); the others throw std::logic_error.
  virtual std::vector<solvers::ProblemOutcome> fit(ProbeBank& bank, const FitData& data) const;
  /// What a fitted probe kept of its inputs, for its metrics (sparse-logistic: [{"index", "weight"}] of the columns
  /// it reads, largest weight first); null for a kind that reads every column.
  virtual Json fitted_features(const ProbeBank& bank, int64_t probe) const;
};

/// What every every-token kind records of how it reads a text's rows (max_tokens, skip_leading), into a
/// probes.json index or a file's model_config, and reads back.
void describe_token_reading(const ProbeShape& shape, Json& fields);
void read_token_reading(const Json& index, const std::string& where, ProbeShape& shape);

/// The parameters of one probe of `shape` (its kind's).
std::vector<ParameterSpec> parameter_specs(const ProbeShape& shape);

}  // namespace probekit::probes
