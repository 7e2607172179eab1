#include "inference/stream_batch.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "common/error.h"
#include "generation/sampling.h"
#include "inference/text_stream.h"

namespace probekit::inference {

struct StreamBatch::Stream {
  Stream(StreamRequest r, uint64_t serial, const tokenizer::Tokenizer& tokenizer, const steering::SteeringVectors* steer,
         at::Device device)
      : request(std::move(r)),
        serial(serial),
        sampler(request.options.sampling, request.options.first_row, request.options.row_keys),
        text(tokenizer, request.prompt_ids),
        suppressed(at::tensor(std::vector<int64_t>(request.options.suppressed_ids.begin(), request.options.suppressed_ids.end()),
                              at::kLong).to(device)),
        steering(steer) {
    generated.prompt_ids = request.prompt_ids;
  }

  StreamRequest request;
  uint64_t serial;  // which stream a launched row belongs to, after others left
  generation::TokenSampler sampler;
  TextStream text;
  at::Tensor suppressed;  // ids never chosen, on the device
  const steering::SteeringVectors* steering;  // its row's steering; null: none
  std::shared_ptr<const steering::SteeringVectors> steered_by_monitor;  // `steering` once a monitor steered it
  std::unique_ptr<monitor::StreamMonitors> monitors;  // null: none
  std::vector<monitor::Firing> prompt_firings;  // reported with the first token
  GeneratedText generated;
  int64_t launched = 0;  // tokens launched: those handed out, and the one in flight
};

// A step on the device: each row's finite flag (of the final norm its token was chosen from), token and scores
// (unless every-token probes score the whole text on delivery), and each SAE's largest latents at the token, on
// their way to the host.
struct StreamBatch::Launched {
  std::vector<uint64_t> serials;  // each row's stream
  // finite [B], tokens [B], then scores [B, probes], then per --sae SAE its packed latents [B, 2 K + 2]
  std::vector<std::unique_ptr<device::HostCopy>> copies;
};

StreamBatch::StreamBatch(const Engine& engine)
    : engine_(engine),
      // Every-token probes read each stream's whole text so far (step()), not the generation's passes.
      reader_(engine.model(), engine.reads_every_token() ? nullptr : &engine.request_, engine.prompts_->suffix_ids(),
              nullptr, engine.latent_requests()) {}

StreamBatch::~StreamBatch() = default;

size_t StreamBatch::join(std::vector<StreamRequest> requests) {
  c10::InferenceMode inference_mode;
  std::vector<std::unique_ptr<Stream>> arriving;
  size_t taken = 0;
  for (StreamRequest& request : requests) {
    auto on_end = request.on_end;
    std::unique_ptr<Stream> stopped;  // by a prompt monitor
    try {
      if (request.options.max_new_tokens < 1) fail_usage("max_new_tokens must be positive, got {}", request.options.max_new_tokens);
      if (!request.prompt_mask.empty() && request.prompt_mask.size() != request.prompt_ids.size()) {
        fail_input("the prompt's mask has {} tokens, the prompt {}", request.prompt_mask.size(), request.prompt_ids.size());
      }
      const steering::SteeringVectors* steering =
          request.steering ? request.steering.get() : (engine_.steering_.empty() ? nullptr : &engine_.steering_);
      auto stream = std::make_unique<Stream>(std::move(request), joined_++, engine_.tokenizer(), steering,
                                             engine_.model().device());
      if (stream->request.monitors) stream->monitors = std::make_unique<monitor::StreamMonitors>(stream->request.monitors);
      if (watch_prompt(*stream)) {
        stopped = std::move(stream);
      } else {
        arriving.push_back(std::move(stream));
      }
    } catch (...) {
      on_end(GeneratedText{}, std::current_exception());
      continue;
    }
    ++taken;
    if (!stopped) continue;
    stopped->generated.stop = generation::StopReason::kMonitor;
    stopped->generated.text += stopped->text.flush();
    stopped->request.on_end(stopped->generated, nullptr);
  }
  if (arriving.empty()) return taken;
  try {
    run_prompts(arriving);
  } catch (...) {
    // The pass of them all failed (adding none): each runs alone, so that only a prompt the model refuses ends its
    // stream.
    const std::exception_ptr error = std::current_exception();
    for (auto& stream : arriving) {
      std::vector<std::unique_ptr<Stream>> one;
      one.push_back(std::move(stream));
      try {
        if (arriving.size() == 1) std::rethrow_exception(error);
        run_prompts(one);
      } catch (...) {
        one.front()->request.on_end(GeneratedText{}, std::current_exception());
        --taken;
      }
    }
  }
  place_writes();
  return taken;
}

void StreamBatch::run_prompts(std::vector<std::unique_ptr<Stream>>& arriving) {
  std::vector<readout::Sequence> prompts;
  std::vector<const steering::SteeringVectors*> steering;
  int64_t new_tokens = 0;
  for (const auto& stream : arriving) {
    prompts.push_back(stream->request.prompt_ids);
    steering.push_back(stream->steering);
    new_tokens = std::max(new_tokens, stream->request.options.max_new_tokens);
  }
  const bool steered = std::any_of(steering.begin(), steering.end(), [](const auto* s) { return s != nullptr; });
  const model::StreamWrites writes = steered ? steering::place_rows(steering, engine_.model()) : model::StreamWrites();
  const size_t before = streams_.size();
  at::Tensor hidden = reader_.join(prompts, new_tokens, steered ? &writes : nullptr);
  try {
    hidden_ = hidden_.defined() ? at::cat({hidden_, hidden}) : hidden;
  } catch (...) {
    std::vector<int64_t> kept(before);
    std::iota(kept.begin(), kept.end(), int64_t{0});
    reader_.keep_rows(kept);  // the rows just joined leave the reader again
    throw;
  }
  for (auto& stream : arriving) streams_.push_back(std::move(stream));
}

// A prompt-scope monitor reads the prompt's tokens as --per-token scores them (a pass of its own, before the
// stream's); one that steers steers the whole generation, its prompt's pass included.
bool StreamBatch::watch_prompt(Stream& s) {
  if (!s.monitors || !s.monitors->watches(monitor::Scope::kPrompt)) return false;
  TokenScores scores;
  scores.mask = s.request.prompt_mask;  // a chat's prompt pools its masked tokens only, as capture read them
  engine_.score_token_ids(s.request.prompt_ids, s.steering, scores, true, s.request.before_pass);
  for (size_t t = 0; t < scores.probability.size(); ++t) {
    const auto& own = scores.token_probability.empty() ? scores.probability[t] : scores.token_probability[t];
    std::vector<monitor::Firing> firings =
        s.monitors->observe(own, scores.probability[t], static_cast<int64_t>(t), monitor::Scope::kPrompt);
    if (firings.empty()) continue;
    s.prompt_firings.insert(s.prompt_firings.end(), firings.begin(), firings.end());
    s.generated.firings.insert(s.generated.firings.end(), firings.begin(), firings.end());
    if (act_on(s, firings)) return true;
  }
  return false;
}

namespace {

// What a stream's monitors ask of it, carried out by StreamBatch::act_on.
struct MonitorRequests : monitor::MonitoredStream {
  bool stop_asked = false;
  bool steer_asked = false;
  void stop() override { stop_asked = true; }
  void steer() override { steer_asked = true; }
};

}  // namespace

bool StreamBatch::act_on(Stream& s, const std::vector<monitor::Firing>& firings) {
  bool stopped = false;
  for (const monitor::Firing& firing : firings) {
    const monitor::ResolvedMonitor& m = s.monitors->monitor(firing.monitor);
    MonitorRequests requests;
    m.action->act(requests);
    stopped = stopped || requests.stop_asked;
    if (!requests.steer_asked || !m.steering) continue;
    // The stream's own steering, then the monitor's.
    auto combined = std::make_shared<steering::SteeringVectors>(s.steering ? *s.steering : steering::SteeringVectors());
    combined->additions.insert(combined->additions.end(), m.steering->additions.begin(), m.steering->additions.end());
    combined->ablations.insert(combined->ablations.end(), m.steering->ablations.begin(), m.steering->ablations.end());
    // A monitor's clamp of a latent the stream clamps already replaces it.
    for (const steering::SteeringVectors::Clamp& clamp : m.steering->clamps) combined->replace_clamp(clamp);
    s.steered_by_monitor = combined;
    s.steering = combined.get();
    writes_changed_ = true;
  }
  return stopped;
}

bool StreamBatch::steering_pending() const {
  return std::any_of(streams_.begin(), streams_.end(), [](const auto& s) { return s->monitors && s->monitors->steering_pending(); });
}

// Each row's next token by its own sampler (and seed), from its row of the logits, as a generation of one prompt
// chooses it.
at::Tensor StreamBatch::choose_tokens(const at::Tensor& logits) {
  std::vector<at::Tensor> chosen;
  for (size_t b = 0; b < streams_.size(); ++b) {
    Stream& s = *streams_[b];
    at::Tensor row = logits.narrow(0, static_cast<int64_t>(b), 1);
    if (s.suppressed.numel() > 0) row.index_fill_(1, s.suppressed, -std::numeric_limits<float>::infinity());
    chosen.push_back(s.sampler.choose(row));
  }
  return at::cat(chosen);
}

void StreamBatch::step() {
  if (streams_.empty()) return;
  c10::InferenceMode inference_mode;
  std::unique_ptr<Launched> launched = in_flight_ ? std::move(in_flight_) : launch();
  // Every-token probes score each text with its new token, known on the host only: a forward that waits for the
  // step anyway, and the launched rows stay those of streams_.
  if (!engine_.reads_every_token() && tokens_left() && !steering_pending()) in_flight_ = launch();
  deliver(*launched);
  if (writes_changed_) place_writes();
}

std::unique_ptr<StreamBatch::Launched> StreamBatch::launch() {
  auto launched = std::make_unique<Launched>();
  at::Tensor finite = at::isfinite(hidden_).all(1);
  at::Tensor tokens = choose_tokens(engine_.model().logits(hidden_));
  readout::IncrementalReader::Step step = reader_.step(tokens, at::ones_like(tokens));
  hidden_ = step.final_norm;
  std::vector<at::Tensor> outputs{finite, tokens};
  if (!engine_.reads_every_token()) outputs.push_back(engine_.probabilities_of(step.rows));
  outputs.insert(outputs.end(), step.token_rows.begin(), step.token_rows.end());
  for (const at::Tensor& output : outputs) launched->copies.push_back(std::make_unique<device::HostCopy>(output, &pinned_));
  for (auto& s : streams_) {
    launched->serials.push_back(s->serial);
    ++s->launched;
  }
  return launched;
}

bool StreamBatch::tokens_left() const {
  return std::any_of(streams_.begin(), streams_.end(),
                     [](const auto& s) { return s->launched < s->request.options.max_new_tokens; });
}

void StreamBatch::deliver(Launched& launched) {
  const at::Tensor& finite = launched.copies[0]->wait();
  const at::Tensor& tokens = launched.copies[1]->wait();
  std::vector<size_t> here;  // each launched row's stream's index now; streams_.size() for one that left
  std::vector<Stream*> rows;
  std::vector<int32_t> ids;
  for (size_t row = 0; row < launched.serials.size(); ++row) {
    auto it = std::find_if(streams_.begin(), streams_.end(), [&](const auto& s) { return s->serial == launched.serials[row]; });
    here.push_back(static_cast<size_t>(it - streams_.begin()));
    if (it == streams_.end()) continue;
    rows.push_back(it->get());
    ids.push_back(static_cast<int32_t>(tokens.data_ptr<int64_t>()[row]));
  }
  // Every-token probes score the texts of the rows (those of streams_, see step()); the others' scores come by row.
  at::Tensor token_scores;  // ema and rolling probes: each new token's own score
  const at::Tensor scores =
      engine_.reads_every_token() ? whole_text_scores(rows, ids, &token_scores).to(at::kCPU) : launched.copies[2]->wait();
  if (token_scores.defined()) token_scores = token_scores.to(at::kCPU);
  std::vector<bool> ended(streams_.size(), false);
  std::vector<std::exception_ptr> errors(streams_.size());
  int64_t scored = 0;
  for (size_t row = 0; row < launched.serials.size(); ++row) {
    const size_t b = here[row];
    if (b == streams_.size()) continue;
    const int64_t score_row = engine_.reads_every_token() ? scored++ : static_cast<int64_t>(row);
    if (!finite.data_ptr<bool>()[row]) {
      // A row whose numbers went non-finite ends with the error everywhere else gives; the others go on.
      ended[b] = true;
      errors[b] = std::make_exception_ptr(
          std::invalid_argument(readout::non_finite_message("the model's outputs (after its final norm) are")));
      continue;
    }
    ended[b] = hand_out(*streams_[b], static_cast<int32_t>(tokens.data_ptr<int64_t>()[row]), scores[score_row],
                        token_scores.defined() ? token_scores[score_row] : at::Tensor(),
                        latents_of(launched, row), errors[b]);
  }
  leave(ended, errors);
}

TokenLatents StreamBatch::latents_of(Launched& launched, size_t row) const {
  TokenLatents latents;
  const size_t first = launched.copies.size() - engine_.saes_.size();  // the SAEs' copies come last
  for (size_t i = 0; i < engine_.saes_.size(); ++i) {
    const at::Tensor& packed = launched.copies[first + i]->wait();
    latents[engine_.saes_[i].name] = sae::unpack_latents(packed[static_cast<int64_t>(row)], engine_.saes_[i]);
  }
  return latents;
}

bool StreamBatch::hand_out(Stream& s, int32_t id, const at::Tensor& scores, const at::Tensor& token_scores,
                           TokenLatents latents, std::exception_ptr& error) {
  const generation::GenerationOptions& o = s.request.options;
  const auto index = static_cast<int64_t>(s.generated.ids.size());
  const bool eos = std::find(o.stop_ids.begin(), o.stop_ids.end(), id) != o.stop_ids.end();
  const bool last = eos || index + 1 == o.max_new_tokens;
  std::vector<std::vector<double>> table = engine_.column_table(scores);
  std::vector<std::vector<double>> own;  // the token's own score, where the probes give one
  if (token_scores.defined()) own = engine_.column_table(token_scores);
  std::vector<monitor::Firing> firings;
  if (s.monitors) firings = s.monitors->observe(own.empty() ? table : own, table, index, monitor::Scope::kCompletion);
  s.generated.firings.insert(s.generated.firings.end(), firings.begin(), firings.end());
  if (act_on(s, firings)) {
    s.generated.stop = generation::StopReason::kMonitor;
    return true;
  }
  ScoredToken scored{0, index, static_cast<int64_t>(s.generated.prompt_ids.size()) + index, id,
                     engine_.tokenizer().tokens({id}).front(), s.text.add(id, last), last, std::move(table),
                     std::move(s.prompt_firings)};
  scored.firings.insert(scored.firings.end(), firings.begin(), firings.end());
  scored.token_probability = std::move(own);
  scored.latents = std::move(latents);
  s.prompt_firings.clear();
  s.generated.ids.push_back(id);
  s.generated.text += scored.text;
  if (last) s.generated.stop = eos ? generation::StopReason::kEos : generation::StopReason::kLength;
  bool keep = false;
  try {
    keep = s.request.on_token(scored);
  } catch (...) {
    error = std::current_exception();
  }
  if (!keep && !last) s.generated.stop = generation::StopReason::kCancelled;
  return !keep || last;
}

at::Tensor StreamBatch::whole_text_scores(const std::vector<Stream*>& rows, const std::vector<int32_t>& ids,
                                          at::Tensor* token_scores) const {
  const bool masked = std::any_of(rows.begin(), rows.end(), [](const Stream* s) { return !s->request.prompt_mask.empty(); });
  std::vector<readout::Sequence> texts;
  std::vector<std::vector<uint8_t>> masks;  // with a chat among the rows: its prompt's masked tokens and the reply's
  for (size_t i = 0; i < rows.size(); ++i) {
    const GeneratedText& g = rows[i]->generated;
    texts.push_back(g.prompt_ids);
    texts.back().insert(texts.back().end(), g.ids.begin(), g.ids.end());
    texts.back().push_back(ids[i]);
    if (!masked) continue;
    std::vector<int32_t> reply = g.ids;
    reply.push_back(ids[i]);
    masks.push_back(engine_.text_so_far_mask(rows[i]->request.prompt_mask, reply));
    if (masks.back().empty()) masks.back().assign(texts.back().size(), 1);
  }
  const bool steered = !writes_.empty();
  return engine_.prompt_probabilities(texts, steered ? &writes_ : nullptr, steered, token_scores, masks);
}

void StreamBatch::leave(const std::vector<bool>& ended, const std::vector<std::exception_ptr>& errors) {
  std::vector<int64_t> kept;
  std::vector<std::unique_ptr<Stream>> staying, gone;
  std::vector<std::exception_ptr> gone_errors;
  for (size_t b = 0; b < streams_.size(); ++b) {
    if (ended[b]) {
      gone.push_back(std::move(streams_[b]));
      gone_errors.push_back(errors[b]);
    } else {
      kept.push_back(static_cast<int64_t>(b));
      staying.push_back(std::move(streams_[b]));
    }
  }
  streams_ = std::move(staying);
  if (streams_.empty()) in_flight_.reset();
  if (!gone.empty()) {
    reader_.keep_rows(kept);
    hidden_ = kept.empty() ? at::Tensor() : hidden_.index_select(0, at::tensor(kept, at::kLong).to(hidden_.device()));
    place_writes();
  }
  for (size_t i = 0; i < gone.size(); ++i) {
    gone[i]->generated.text += gone[i]->text.flush();  // byte tokens held back when the row stopped early
    gone[i]->request.on_end(gone[i]->generated, gone_errors[i]);
  }
}

void StreamBatch::end_all(std::exception_ptr error) {
  std::vector<std::unique_ptr<Stream>> gone = std::move(streams_);
  streams_.clear();
  in_flight_.reset();
  reader_.keep_rows({});
  hidden_ = at::Tensor();
  place_writes();
  for (auto& s : gone) {
    s->generated.stop = generation::StopReason::kCancelled;
    s->generated.text += s->text.flush();
    s->request.on_end(s->generated, error);
  }
}

// The rows' steering as one set of writes ([B, hidden] each, zeros for a row without): adding zeros and projecting
// out a zero direction leave a row's numbers as they are.
void StreamBatch::place_writes() {
  writes_changed_ = false;
  std::vector<const steering::SteeringVectors*> rows;
  bool steered = false;
  for (const auto& s : streams_) {
    rows.push_back(s->steering);
    steered = steered || s->steering != nullptr;
  }
  writes_ = steered ? steering::place_rows(rows, engine_.model()) : model::StreamWrites();
  reader_.set_writes(steered ? &writes_ : nullptr);
}

}  // namespace probekit::inference
