#include "inference/stream_batch.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <limits>

#include "common/error.h"
#include "generation/sampling.h"
#include "inference/text_stream.h"

namespace probekit::inference {

struct StreamBatch::Stream {
  Stream(StreamRequest r, const tokenizer::Tokenizer& tokenizer, const steering::SteeringVectors* steer, at::Device device)
      : request(std::move(r)),
        sampler(request.options.sampling),
        text(tokenizer, request.prompt_ids),
        suppressed(at::tensor(std::vector<int64_t>(request.options.suppressed_ids.begin(), request.options.suppressed_ids.end()),
                              at::kLong).to(device)),
        steering(steer) {
    generated.prompt_ids = request.prompt_ids;
  }

  StreamRequest request;
  generation::TokenSampler sampler;
  TextStream text;
  at::Tensor suppressed;  // ids never chosen, on the device
  const steering::SteeringVectors* steering;  // its row's steering; null: none
  GeneratedText generated;
};

StreamBatch::StreamBatch(const Engine& engine)
    : engine_(engine),
      // Every-token probes read each stream's whole text so far (step()), not the generation's passes.
      reader_(engine.model(), engine.reads_every_token() ? nullptr : &engine.request_, engine.prompts_->suffix_ids(),
              nullptr) {}

StreamBatch::~StreamBatch() = default;

void StreamBatch::join(StreamRequest request) {
  if (request.options.max_new_tokens < 1) fail_usage("max_new_tokens must be positive, got {}", request.options.max_new_tokens);
  c10::InferenceMode inference_mode;
  const steering::SteeringVectors* steering =
      request.steering ? request.steering.get() : (engine_.steering_.empty() ? nullptr : &engine_.steering_);
  const model::StreamWrites alone = steering ? steering::place_rows({steering}, engine_.model()) : model::StreamWrites();
  at::Tensor hidden = reader_.join(request.prompt_ids, request.options.max_new_tokens, steering ? &alone : nullptr);
  hidden_ = hidden_.defined() ? at::cat({hidden_, hidden}) : hidden;
  streams_.push_back(std::make_unique<Stream>(std::move(request), engine_.tokenizer(), steering, engine_.model().device()));
  place_writes();
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
  const size_t batch = streams_.size();
  std::vector<bool> ended(batch, false);
  std::vector<std::exception_ptr> errors(batch);
  // A row whose numbers went non-finite ends with the error everywhere else gives; the others go on.
  at::Tensor finite = at::isfinite(hidden_).all(1).to(at::kCPU);
  for (size_t b = 0; b < batch; ++b) {
    if (finite[static_cast<int64_t>(b)].item<bool>()) continue;
    ended[b] = true;
    errors[b] = std::make_exception_ptr(
        std::invalid_argument(readout::non_finite_message("the model's outputs (after its final norm) are")));
  }
  if (std::find(ended.begin(), ended.end(), true) != ended.end()) return leave(ended, errors);
  at::Tensor tokens = choose_tokens(engine_.model().logits(hidden_));
  readout::IncrementalReader::Step step = reader_.step(tokens, at::ones_like(tokens));
  hidden_ = step.final_norm;
  at::Tensor ids = tokens.to(at::kCPU).contiguous();
  at::Tensor scores = (engine_.reads_every_token() ? whole_text_scores(ids) : engine_.probabilities_of(step.rows))
                          .to(at::kCPU)
                          .contiguous();
  for (size_t b = 0; b < batch; ++b) {
    Stream& s = *streams_[b];
    const generation::GenerationOptions& o = s.request.options;
    const auto index = static_cast<int64_t>(s.generated.ids.size());
    const auto id = static_cast<int32_t>(ids.data_ptr<int64_t>()[b]);
    const bool eos = std::find(o.stop_ids.begin(), o.stop_ids.end(), id) != o.stop_ids.end();
    const bool last = eos || index + 1 == o.max_new_tokens;
    ScoredToken scored{0, index, static_cast<int64_t>(s.generated.prompt_ids.size()) + index, id,
                       engine_.tokenizer().tokens({id}).front(), s.text.add(id, last), last, {}};
    std::vector<std::vector<std::vector<double>>> table = engine_.empty_tables(1);
    engine_.store_columns(scores[static_cast<int64_t>(b)].unsqueeze(0), table, 0);
    scored.probability = std::move(table.front());
    s.generated.ids.push_back(id);
    s.generated.text += scored.text;
    if (last) s.generated.stop = eos ? generation::StopReason::kEos : generation::StopReason::kLength;
    bool keep = false;
    try {
      keep = s.request.on_token(scored);
    } catch (...) {
      errors[b] = std::current_exception();
    }
    if (!keep && !last) s.generated.stop = generation::StopReason::kCancelled;
    ended[b] = !keep || last;
  }
  leave(ended, errors);
}

at::Tensor StreamBatch::whole_text_scores(const at::Tensor& ids) const {
  std::vector<readout::Sequence> texts;
  for (size_t b = 0; b < streams_.size(); ++b) {
    const GeneratedText& g = streams_[b]->generated;
    texts.push_back(g.prompt_ids);
    texts.back().insert(texts.back().end(), g.ids.begin(), g.ids.end());
    texts.back().push_back(static_cast<int32_t>(ids.data_ptr<int64_t>()[b]));
  }
  const bool steered = !writes_.empty();
  return engine_.prompt_probabilities(texts, steered ? &writes_ : nullptr, steered);
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
  if (!gone.empty()) {
    reader_.keep_rows(kept);
    hidden_ = kept.empty() ? at::Tensor() : hidden_.index_select(0, at::tensor(kept, at::kLong).to(hidden_.device()));
    place_writes();
  }
  for (size_t i = 0; i < gone.size(); ++i) gone[i]->request.on_end(gone[i]->generated, gone_errors[i]);
}

void StreamBatch::end_all(std::exception_ptr error) {
  std::vector<std::unique_ptr<Stream>> gone = std::move(streams_);
  streams_.clear();
  reader_.keep_rows({});
  hidden_ = at::Tensor();
  place_writes();
  for (auto& s : gone) {
    s->generated.stop = generation::StopReason::kCancelled;
    s->request.on_end(s->generated, error);
  }
}

// The rows' steering as one set of writes ([B, hidden] each, zeros for a row without): adding zeros and projecting
// out a zero direction leave a row's numbers as they are.
void StreamBatch::place_writes() {
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
