// Continuous batching of generation streams (the server's): every open stream decodes in one forward per step. A
// stream joins between two steps (its prompt run alone first, as a generation of one prompt runs it) and leaves
// when it ends; each keeps its own positions, cache rows, sampler and steering row, so that it gives what it
// gives alone.
#pragma once

#include <ATen/ATen.h>

#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "inference/engine.h"
#include "readout/incremental.h"

namespace probekit::inference {

/// One stream to generate.
struct StreamRequest {
  std::vector<int32_t> prompt_ids;  // tokenized as the caller wants it (special tokens or not)
  generation::GenerationOptions options;  // its `writes` are ignored: `steering` steers the stream
  std::shared_ptr<const steering::SteeringVectors> steering;  // null: the engine's own steering
  ScoredTokenCallback on_token;  // each new token; returning false ends the stream (cancelled)
  /// Called once when the stream has ended: its generation, and the error that ended it (null when none).
  std::function<void(const GeneratedText&, std::exception_ptr)> on_end;
};

class StreamBatch {
 public:
  explicit StreamBatch(const Engine& engine);
  ~StreamBatch();
  StreamBatch(const StreamBatch&) = delete;
  StreamBatch& operator=(const StreamBatch&) = delete;

  /// Runs the stream's prompt and adds it: its first token comes with the next step. A prompt the model refuses
  /// throws, and nothing joins.
  void join(StreamRequest request);
  /// One forward for every stream: each gets its next token (and the probes' scores of it); those that end leave.
  void step();
  /// Ends every stream with `error` (the server is stopping).
  void end_all(std::exception_ptr error);
  size_t size() const { return streams_.size(); }
  bool empty() const { return streams_.empty(); }

 private:
  struct Stream;
  at::Tensor choose_tokens(const at::Tensor& logits);
  void leave(const std::vector<bool>& ended, const std::vector<std::exception_ptr>& errors);
  void place_writes();
  /// Every-token probes: each stream's scores [B, probes] of its prompt, its tokens and `ids` [B] (the new ones).
  at::Tensor whole_text_scores(const at::Tensor& ids) const;

  const Engine& engine_;
  readout::IncrementalReader reader_;
  std::vector<std::unique_ptr<Stream>> streams_;  // in row order
  at::Tensor hidden_;  // [B, hidden] fp32: the final norm at each row's latest token
  model::StreamWrites writes_;  // every row's steering, [B, hidden] each
};

}  // namespace probekit::inference
