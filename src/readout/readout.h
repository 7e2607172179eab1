// The one place activations are read out of a forward pass. A caller says what it wants (site, position,
// layers) over a list of token sequences; the readout pads them, runs the model with the hook that request
// needs and pools the rows. Capture, ranking, per-token scoring and inspect_model all read through here, so
// a row means the same thing everywhere.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "model/transformer.h"
#include "readout/site_reading.h"
#include "sae/latent_reading.h"

namespace probekit::readout {

using Sequence = std::vector<int32_t>;

/// How read_rows lays a batch out for the model: right-padded rows, or the sequences packed one after another
/// in one row (no work on padding). kAuto packs where one attention kernel serves packed sequences
/// (model::packed_attention_is_fast: CUDA with LibTorch's variable-length flash kernel) and pads elsewhere.
enum class Layout { kAuto, kPadded, kPacked };

/// What to read.
struct Request {
  Site site = Site::kResidPost;
  Position position = Position::kLast;
  std::vector<int64_t> layers;  // ascending, distinct
  int64_t skip_leading = 0;     // special tokens in front that mean and max pooling leave out (BOS)
  Layout layout = Layout::kAuto;
  const model::StreamWrites* writes = nullptr;  // steering applied to the passes that read (none: null)
  // An SAE site: rows made of the site's values by the SAE (its latents, error or sparse latents); `site` and
  // `layers` are then the SAE's own. None: the site's values.
  const sae::LatentReading* latents = nullptr;
  // Called before each forward pass of a read that takes several (read_prefixes); it throws to end the read early
  // (a request past its deadline). None: never.
  std::function<void()> before_pass;
};

/// Whether read_rows packs the sequences of `request` for `model` (then it computes no padding).
bool packs_sequences(const model::TransformerModel& model, const Request& request);

/// Rows of `sequences` at the request's site and position, every requested layer from one forward pass:
/// [rows, layers, site_width] in fp32 on the model's device. One row per sequence, or with Position::kAll one
/// per token, sequence after sequence. With `masks` (a conversation's --mask, one per sequence, 1 per token read),
/// positions read the masked tokens only: the last of them, their mean or max, or each of their rows.
at::Tensor read_rows(const model::TransformerModel& model, const std::vector<Sequence>& sequences,
                     const Request& request, const std::vector<std::vector<uint8_t>>& masks = {});

/// Row t [layers, hidden] is what `request` (position last) reads for the prompt text[0..t] + suffix:
/// one pass over the text records its keys and values, then batched passes run the suffix after each prefix
/// on top of them (not one forward per prefix). Returns [T, layers, hidden] in fp32 on the model's device.
at::Tensor read_prefixes(const model::TransformerModel& model, const Sequence& text, const Sequence& suffix,
                         const Request& request);

/// The next-token log-probabilities (fp32, on the model's device) of each sequence at its positions
/// [from[b], length - 1): what the model predicts for tokens from[b] + 1 on, given what comes before, one [n_b, vocab]
/// tensor per sequence (teacher forcing: the distributions a generation of those tokens sampled from). `writes` steer the
/// pass (per row: [B, hidden] vectors). Needs the final norm and the LM head.
std::vector<at::Tensor> read_next_token_log_probs(const model::TransformerModel& model,
                                                  const std::vector<Sequence>& sequences,
                                                  const std::vector<int64_t>& from,
                                                  const model::StreamWrites* writes = nullptr);

/// One sequence's hidden states as transformers' output_hidden_states gives them, in fp32 on the host.
struct HiddenStates {
  at::Tensor embeddings;  // [T, hidden]: the residual stream's input
  at::Tensor layers;      // [layers, T, hidden]: each loaded layer's output
  at::Tensor final_norm;  // [T, hidden]
  at::Tensor router_logits;  // [layers with a router, T, experts]: their logits before the softmax; MoE models only
};
/// Every loaded layer's output for `ids`, with the embeddings, the final norm (which must be loaded) and, for
/// a model with routed experts, the router logits of its loaded layers that have a router; with `writes` applied.
HiddenStates read_hidden_states(const model::TransformerModel& model, const Sequence& ids,
                                const model::StreamWrites* writes = nullptr);

/// One run of a sequence read at sites of every loaded layer and at the next-token logits of its last token.
struct SiteRun {
  std::map<Site, std::vector<at::Tensor>> values;  // per site, per layer: [T, width] as the pass computed them
  at::Tensor logits;                               // [vocab] fp32
};
/// `ids` run once with `writes`, read at `sites` (writable decoder sites: resid_post, attn_out, mlp_out) of every
/// loaded layer, each layer's values on that layer's device in the dtype the pass computed them (what a patch
/// puts back bit for bit). With `gradients` the logits carry the autograd graph back to the writes' tensors that
/// require gradients (attribution patching). Needs the final norm and the LM head.
SiteRun read_site_run(const model::TransformerModel& model, const Sequence& ids, const std::vector<Site>& sites,
                      const model::StreamWrites* writes = nullptr, bool gradients = false);
/// The same for rows of ids of one length run as one pass (`writes` per row, [rows, ...]), already checked
/// (check_runnable) and on the model's device, [rows, T] int64: a run per row, without a host synchronisation, as a
/// captured pass needs.
std::vector<SiteRun> read_site_runs(const model::TransformerModel& model, const at::Tensor& input_ids,
                                    const std::vector<Site>& sites, const model::StreamWrites* writes = nullptr,
                                    bool gradients = false);
/// Refuses `ids` a run cannot read the next token of: empty, out of the vocabulary, or no LM head loaded.
void check_runnable(const model::TransformerModel& model, const Sequence& ids);

/// The next-token logits [rows, vocab] (fp32) at the last token of `ids` run as `rows` rows, each with its own
/// writes (`writes` per row: patches of [rows, T] positions, [rows, ...] additions): activation patching's cells
/// ride as rows of one pass.
at::Tensor read_last_logits(const model::TransformerModel& model, const Sequence& ids, int64_t rows,
                            const model::StreamWrites& writes);

/// "`what` not finite (NaN or Inf): the checkpoint's weights or its config (...) produce them": how every tool refuses
/// non-finite activations (`what`: "the activations of layer 5 are").
std::string non_finite_message(const std::string& what);

/// Refuses rows that hold NaN or Inf, naming the first such layer: `layers[i]` for index i along `layer_dim`; the
/// message starts with `where` when given. A model whose numbers go non-finite is refused, never shown as NaN scores.
void check_finite_rows(const at::Tensor& rows, int64_t layer_dim, const std::vector<int64_t>& layers,
                       const std::string& where = "");

}  // namespace probekit::readout
