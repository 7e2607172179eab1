#include "generation/generator.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <limits>
#ifdef __linux__
#include <malloc.h>  // malloc_trim
#else
#include <cstdlib>
#endif

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "readout/incremental.h"
#include "readout/readout.h"

namespace probekit::generation {

namespace {

constexpr int64_t kTrimSteps = 256;  // steps between two returns of the CPU's freed memory

// glibc's malloc_trim (Debian's C library); macOS's allocator returns freed memory to the system itself.
void return_freed_memory() {
#ifdef __linux__
  ::malloc_trim(0);
#else
  // Nothing to do.
#endif
}

// eos_token_id as written: a number, a list of numbers, or null.
std::vector<int32_t> eos_ids(const Json& object, const std::string& where) {
  auto found = object.find("eos_token_id");
  if (found == object.end() || found->is_null()) return {};
  std::vector<int32_t> ids;
  auto add = [&](const Json& id) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      fail("{}: 'eos_token_id' must be a token id or a list of them, got {}", where, found->dump());
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  };
  if (found->is_array()) {
    for (const Json& id : *found) add(id);
  } else {
    add(*found);
  }
  return ids;
}

// The host's copy of one step: the chosen tokens, the largest logits and the probes' rows.
struct StepOnHost {
  std::vector<int64_t> tokens;
  at::Tensor top_ids, top_logits;  // [B, k]
  at::Tensor rows;                 // [B, layers, width]
};

StepOnHost copy_to_host(const at::Tensor& tokens, const at::Tensor& logits, int64_t top_logits, const at::Tensor& rows) {
  StepOnHost host;
  at::Tensor on_host = tokens.to(at::kCPU).contiguous();
  host.tokens.assign(on_host.data_ptr<int64_t>(), on_host.data_ptr<int64_t>() + on_host.numel());
  if (top_logits > 0) {
    auto [values, ids] = logits.topk(std::min<int64_t>(top_logits, logits.size(1)), -1);
    host.top_logits = values.to(at::kCPU).contiguous();
    host.top_ids = ids.to(at::kCPU).contiguous();
  }
  if (rows.defined()) host.rows = rows.to(at::kCPU).contiguous();
  return host;
}

// The rows' bookkeeping: which still go, what each generated and why it stopped; hands tokens to the callback.
class GenerationLoop {
 public:
  GenerationLoop(const GenerationOptions& options, const TokenCallback& on_token, size_t rows)
      : options_(options), on_token_(on_token), results_(rows), going_(rows, true) {}

  bool any_going() const { return std::find(going_.begin(), going_.end(), true) != going_.end(); }
  /// The rows still going, as a [B] tensor of 0 and 1 on `device`.
  at::Tensor going_on(at::Device device) const {
    return at::tensor(std::vector<int64_t>(going_.begin(), going_.end()), at::kLong).to(device);
  }

  /// Hands step `index`'s tokens of the rows still going to the callback and records where rows stop.
  void deliver(const StepOnHost& step, int64_t index, const std::vector<int64_t>& prompt_lengths) {
    for (size_t b = 0; b < going_.size(); ++b) {
      if (!going_[b]) continue;
      GeneratedToken token;
      token.row = b;
      token.index = index;
      token.position = prompt_lengths[b] + index;
      token.id = static_cast<int32_t>(step.tokens[b]);
      const bool eos = std::find(options_.stop_ids.begin(), options_.stop_ids.end(), token.id) != options_.stop_ids.end();
      token.last = eos || index + 1 == options_.max_new_tokens;
      if (step.top_ids.defined()) {
        const auto b_index = static_cast<int64_t>(b);
        const int64_t* ids = step.top_ids[b_index].data_ptr<int64_t>();
        const float* logits = step.top_logits[b_index].data_ptr<float>();
        token.top_ids.assign(ids, ids + step.top_ids.size(1));
        token.top_logits.assign(logits, logits + step.top_logits.size(1));
      }
      if (step.rows.defined()) token.rows = step.rows[static_cast<int64_t>(b)];
      results_[b].ids.push_back(token.id);
      if (token.last) results_[b].stop = eos ? StopReason::kEos : StopReason::kLength;
      bool keep = on_token_(token);
      if (!keep && !token.last) results_[b].stop = StopReason::kCancelled;
      going_[b] = keep && !token.last;
    }
  }

  std::vector<Generation> results() { return std::move(results_); }

 private:
  const GenerationOptions& options_;
  const TokenCallback& on_token_;
  std::vector<Generation> results_;
  std::vector<bool> going_;
};

}  // namespace

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kEos: return "eos";
    case StopReason::kLength: return "length";
    case StopReason::kCancelled: return "cancelled";
    case StopReason::kMonitor: return "monitor";
  }
  return "?";
}

std::vector<int32_t> read_stop_ids(const std::string& model_dir) {
  const std::string generation_config = model_dir + "/generation_config.json";
  if (path_exists(generation_config)) {
    Json json = read_json_file(generation_config);
    if (json.is_object() && json.contains("eos_token_id")) return eos_ids(json, generation_config);
  }
  const std::string config_path = model_dir + "/config.json";
  Json config = read_json_file(config_path);
  if (!config.is_object()) return {};
  if (config.contains("eos_token_id") && !config.at("eos_token_id").is_null()) return eos_ids(config, config_path);
  auto text_config = config.find("text_config");
  if (text_config != config.end() && text_config->is_object()) return eos_ids(*text_config, config_path + " (text_config)");
  return {};
}

GenerationOptions GenerationOptions::rows(size_t first, size_t end) const {
  GenerationOptions part = *this;
  part.first_row = first_row + first;
  if (!row_keys.empty()) {
    if (first > end || end > row_keys.size()) {
      throw std::logic_error(fmt::format("rows {} to {} of {} row keys", first, end, row_keys.size()));
    }
    part.row_keys.assign(row_keys.begin() + static_cast<std::ptrdiff_t>(first),
                         row_keys.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return part;
}

std::vector<Generation> generate(const model::TransformerModel& model, const std::vector<readout::Sequence>& prompts,
                                 const GenerationOptions& options, const ProbeReadout* probes,
                                 const TokenCallback& on_token) {
  if (options.max_new_tokens < 1) fail_usage("--max-new-tokens must be positive, got {}", options.max_new_tokens);
  if (!model.has_lm_head()) fail_input("generation needs the model's LM head loaded");
  c10::InferenceMode inference_mode;
  TokenSampler sampler(options.sampling, options.first_row, options.row_keys);
  readout::IncrementalReader reader(model, probes != nullptr ? &probes->request : nullptr,
                                    probes != nullptr ? probes->suffix : readout::Sequence{}, options.writes);
  std::vector<int64_t> prompt_lengths;
  for (const readout::Sequence& prompt : prompts) prompt_lengths.push_back(static_cast<int64_t>(prompt.size()));
  at::Tensor hidden = reader.start(prompts, options.max_new_tokens);
  GenerationLoop loop(options, on_token, prompts.size());
  at::Tensor suppressed = at::tensor(std::vector<int64_t>(options.suppressed_ids.begin(), options.suppressed_ids.end()),
                                     at::kLong).to(model.device());
  for (int64_t index = 0; index < options.max_new_tokens && loop.any_going(); ++index) {
    // On the CPU each step's buffers grow with the cache; glibc keeps the smaller ones they outgrew, which a long
    // generation piled up by gigabytes (10,000 tokens of a 0.2M-parameter model held 3 GB): handed back now and then.
    if (model.device().is_cpu() && index % kTrimSteps == kTrimSteps - 1) return_freed_memory();
    // One small copy to the host per step, beside the token's: a model whose numbers go non-finite is refused as
    // everywhere, not sampled from NaN.
    if (!at::isfinite(hidden).all().item<bool>()) {
      fail_input("{}", readout::non_finite_message("the model's outputs (after its final norm) are"));
    }
    at::Tensor logits = model.logits(hidden);
    if (suppressed.numel() > 0) logits.index_fill_(1, suppressed, -std::numeric_limits<float>::infinity());
    at::Tensor tokens = sampler.choose(logits);
    at::Tensor rows;
    // The token's own pass gives its probes' rows and the next logits; queued before the host reads the token.
    if (probes != nullptr || index + 1 < options.max_new_tokens) {
      readout::IncrementalReader::Step step = reader.step(tokens, loop.going_on(model.device()));
      hidden = step.final_norm;
      rows = probes != nullptr && probes->score ? probes->score(step.rows) : step.rows;
    }
    loop.deliver(copy_to_host(tokens, logits, options.top_logits, rows), index, prompt_lengths);
  }
  return loop.results();
}

}  // namespace probekit::generation
