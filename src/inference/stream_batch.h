// Continuous batching of generation streams (the server's): every open stream decodes in one forward per step.
// Streams join between two steps (the prompts arriving together run in one pass of their own first, as a
// generation of those prompts runs them) and leave when they end; each keeps its own positions, cache rows, sampler
// and steering row, so that it gives what it gives alone. Steps are pipelined: the next step goes to the device
// before this one's tokens reach the host, so the device computes while the host hands tokens out (and launches a
// step's graph), never idle between steps.
// A stream's monitors watch its tokens' scores and act on that stream alone (monitor/actions.h): a stop ends it
// before the token that fired, a steer changes its row of the writes from its next token on (while such a monitor
// waits, steps are not launched ahead, so that the next token's pass is the first steered).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "device/torch/transfers.h"
#include "inference/engine.h"
#include "readout/incremental.h"

namespace probekit::inference {

/// One stream to generate.
struct StreamRequest {
  std::vector<int32_t> prompt_ids;  // tokenized as the caller wants it (special tokens or not)
  std::vector<uint8_t> prompt_mask;  // a chat prompt's tokens in the probes' mask (Engine::chat_prompt_mask); empty: all
  generation::GenerationOptions options;  // its `writes` are ignored: `steering` steers the stream
  std::shared_ptr<const steering::SteeringVectors> steering;  // null: the engine's own steering
  std::shared_ptr<const monitor::MonitorSet> monitors;  // null: none (Engine::resolve_monitors)
  ScoredTokenCallback on_token;  // each new token; returning false ends the stream (cancelled)
  std::function<bool()> abandoned;  // whether its reader has gone (null: never); the server joins no such stream
  /// Called before each pass of a prompt monitor's reading (a long prompt's prefixes take several); throwing ends the
  /// stream there with that error (the server's: its reader has gone, its deadline has passed). Null: never.
  std::function<void()> before_pass;
  /// Called once when the stream has ended: its generation, and the error that ended it (null when none).
  std::function<void(const GeneratedText&, std::exception_ptr)> on_end;
};

class StreamBatch {
 public:
  explicit StreamBatch(const Engine& engine);
  ~StreamBatch();
  StreamBatch(const StreamBatch&) = delete;
  StreamBatch& operator=(const StreamBatch&) = delete;

  /// Runs the streams' prompts, in one pass, and adds them: their first tokens come with the next step. A stream
  /// whose prompt the model refuses ends there (its on_end gets the error) and the others join. Returns how many
  /// were taken (joined, or ended by a prompt monitor), the others having been refused.
  size_t join(std::vector<StreamRequest> requests);
  /// Hands the streams of the forward launched at the call before (launched now when none is in flight) their
  /// next token and the probes' scores of it, having launched the next forward first, every stream in it (one
  /// that joined since gets its first token at the next call); the streams that end leave. A stream that ends had
  /// its row in one forward more, whose outputs nobody reads.
  void step();
  /// Ends every stream with `error` (the server is stopping).
  void end_all(std::exception_ptr error);
  size_t size() const { return streams_.size(); }
  bool empty() const { return streams_.empty(); }

 private:
  struct Stream;
  struct Launched;
  at::Tensor choose_tokens(const at::Tensor& logits);
  /// Chooses each row's next token and queues the forward that feeds it, its outputs' copies to the host behind.
  std::unique_ptr<Launched> launch();
  /// Whether a stream has tokens left to launch.
  bool tokens_left() const;
  /// Hands `launched`'s tokens to the streams still here; those that end leave.
  void deliver(Launched& launched);
  /// Hands `s` its token `id` scored `scores` [probes] (and `token_scores`, its own score, where the probes give one:
  /// else undefined) with its `latents`; whether it ended (an error its callback threw in `error`).
  bool hand_out(Stream& s, int32_t id, const at::Tensor& scores, const at::Tensor& token_scores, TokenLatents latents,
                std::exception_ptr& error);
  /// Row `row`'s latents among a launched step's copies of the SAEs' packed rows.
  TokenLatents latents_of(Launched& launched, size_t row) const;
  /// Runs `s`'s monitors over `firings`' actions; whether one stops it. A steer changes its steering.
  bool act_on(Stream& s, const std::vector<monitor::Firing>& firings);
  /// Prompt-scope monitors over the prompt's tokens before it runs; whether one stopped the stream.
  bool watch_prompt(Stream& s);
  /// Runs the prompts of `arriving` in one pass and adds them (moving them into streams_; the caller places the
  /// writes after); throws, adding none, where the pass fails.
  void run_prompts(std::vector<std::unique_ptr<Stream>>& arriving);
  /// Whether a stream waits for a steering monitor to fire.
  bool steering_pending() const;
  void leave(const std::vector<bool>& ended, const std::vector<std::exception_ptr>& errors);
  void place_writes();
  /// Every-token probes: the scores [rows, probes] of each of `rows`' prompt, tokens and its new token `ids`, and
  /// into `token_scores` each new token's own score where the probes give one (ema, rolling; else undefined).
  at::Tensor whole_text_scores(const std::vector<Stream*>& rows, const std::vector<int32_t>& ids,
                               at::Tensor* token_scores) const;

  const Engine& engine_;
  readout::IncrementalReader reader_;
  std::vector<std::unique_ptr<Stream>> streams_;  // in row order
  at::Tensor hidden_;  // [B, hidden] fp32: the final norm at each row's latest token
  model::StreamWrites writes_;  // every row's steering, [B, hidden] each
  bool writes_changed_ = false;  // a monitor steered a stream: writes_ are placed again after the step
  uint64_t joined_ = 0;  // streams taken so far (refused ones too): each one's serial
  device::PinnedPool pinned_;  // the launched steps' host copies
  std::unique_ptr<Launched> in_flight_;  // the step launched and not yet handed out
};

}  // namespace probekit::inference
