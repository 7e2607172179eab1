// Reading a batch of sequences that grow one token at a time (generation). Their keys and values stay cached at
// their positions, so each step runs only the new tokens. Each step's forward pass feeds every row its new
// token followed by the prompt suffix: the final norm at the new token gives the next token's logits, and the
// suffix's last token gives what the probes read for ids[0..p] + suffix (position last), the prompt read_prefixes
// builds for position p of a text. One pass per step serves both, so the weights are read once per token.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "model/transformer.h"
#include "readout/readout.h"
#include "readout/site_reader.h"
#include "readout/step_graphs.h"

namespace probekit::readout {

class IncrementalReader {
 public:
  /// `request` (position last; may be null: nothing is read but the final norm) is read after each new token
  /// followed by `suffix`; each of `token_reads` (e.g. an SAE's latents: readout.h's Request::latents) at the new
  /// token itself, by the same pass. `writes` (may be null) steer every pass, prompts and new tokens. The model must
  /// hold every layer and the final norm.
  IncrementalReader(const model::TransformerModel& model, const Request* request, Sequence suffix,
                    const model::StreamWrites* writes = nullptr, std::vector<Request> token_reads = {});

  /// Runs the prompts (each at its own positions, however long the others) through every layer, caching their
  /// keys and values with room for `new_tokens` more tokens each. Returns the final norm at each prompt's last
  /// token [B, hidden] in fp32.
  at::Tensor start(const std::vector<Sequence>& prompts, int64_t new_tokens);

  struct Step {
    at::Tensor final_norm;  // [B, hidden] fp32: at each row's new token
    at::Tensor rows;        // [B, layers, width] fp32: the request's rows for ids[0..p] + suffix; undefined without one
    std::vector<at::Tensor> token_rows;  // per token read: [B, width] fp32 at the new token
  };
  /// Feeds `tokens` [B] (int64, on the model's device) at each row's next position. A row whose `advance` [B]
  /// (0 or 1, on the device) is 0 keeps its length: its slot is written again at the next step (a row that
  /// has stopped, whose outputs the caller ignores).
  Step step(const at::Tensor& tokens, const at::Tensor& advance);

  /// Each row's cached tokens [B] (int64, on the device).
  const at::Tensor& lengths() const { return lengths_; }

  // Continuous batching: rows join and leave between steps.

  /// Adds `prompts` as new last rows: run together apart from the rows already here (a batch of their own, steered
  /// by `writes`, a row each, may be null) exactly as start() runs them (on a GPU without writes, with copies of
  /// the last prompt up to a multiple of 16 rows, dropped after), then their keys and values join the
  /// others'. The cache's capacity is a multiple of 64 large enough for every row; a step's visible slots, and so
  /// its attention kernel, follow the batch's longest row (step_visible_slots). Returns the final norm at each
  /// prompt's last token [P, hidden] in fp32.
  at::Tensor join(const std::vector<Sequence>& prompts, int64_t new_tokens, const model::StreamWrites* writes);
  /// Keeps only `rows` (ascending row indices), in that order; the others leave.
  void keep_rows(const std::vector<int64_t>& rows);
  /// The writes of the next steps (their additions and ablations [B, hidden], a row each), may be null.
  void set_writes(const model::StreamWrites* writes);
  int64_t rows() const { return lengths_.defined() ? lengths_.size(0) : 0; }

  /// The steps' CUDA graphs (step_graphs.h): on by default where the model allows them.
  StepGraphs& graphs() { return graphs_; }

 private:
  /// Keeps the rows `kept` [N] (int64 indices) of the caches and lengths, leaving longest_ as it is.
  void select_rows(const at::Tensor& kept);
  void check_cache_memory(int64_t batch, double capacity, int64_t new_tokens) const;
  /// Makes the readers of token_reads_ and step_hook_, which gives a step's values to them and to step_reader_.
  void hook_step_readers();
  /// The tokens a step feeds each row: its new token, then the suffix when reading.
  int64_t step_span() const { return 1 + (request_ != nullptr ? static_cast<int64_t>(suffix_.size()) : 0); }
  /// A step's pass run: its final norm at the new tokens, then the request's rows (when reading).
  std::vector<at::Tensor> run_step(model::ForwardPass& pass) const;
  /// Appends the rows of `other` (after start), both caches grown to `capacity` slots.
  void append_rows(const IncrementalReader& other, int64_t capacity);

  const model::TransformerModel& model_;
  const Request* request_;
  Sequence suffix_;
  const model::StreamWrites* writes_;
  at::Tensor suffix_ids_;  // [S] on the device
  model::KvCache cache_;   // [B, kv_heads, capacity, head_dim] per layer (Gated DeltaNet layers: their states)
  at::Tensor lengths_;
  int64_t longest_ = 0;    // an upper bound of lengths_, known on the host
  int64_t capacity_ = 0;
  bool fused_attention_;  // steps attend through fused::cached_attention (see step_visible_slots)
  // The steps' readers of the request's rows and of the token reads, one each for every step: a captured step keeps
  // reading through them; step_hook_ gives each pass's values to all of them.
  std::unique_ptr<SiteReader> step_reader_;
  std::vector<Request> token_reads_;
  std::vector<std::unique_ptr<SiteReader>> token_readers_;
  model::TensorHook step_hook_;
  uint32_t step_sites_ = 0;
  StepGraphs graphs_;
  int64_t epoch_ = 0;  // changes with the batch's rows, cache and writes: the graphs' key
};

/// The cache slots a decode step makes visible, when its rows reach `reach` slots (the longest row's length and the
/// step's tokens) of `capacity`. The slots past every position of the pass are masked, so this changes the step's
/// shape and, with fused attention, its kernel (the same values to their rounding), not what it computes. Each new
/// shape is a new CUDA graph (15 to 25 ms) and, without fused attention, a new cuDNN plan. With fused attention
/// (`fused`) the kernel stops at each query's position by itself, so short rows see kCachedAttentionShortSlots
/// (fused_ops.h) and longer ones the whole cache: at most two graphs a generation, and the kernel that suits each
/// length. Without it, the visible slots grow in steps of 64.
int64_t step_visible_slots(bool fused, int64_t reach, int64_t capacity);

}  // namespace probekit::readout
