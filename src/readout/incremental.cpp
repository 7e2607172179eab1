#include "readout/incremental.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <utility>

#include "common/error.h"
#include "device/torch/gpu_utils.h"
#include "model/decoder_block.h"
#include "model/fused_ops.h"
#include "readout/site_reader.h"

namespace probekit::readout {

namespace {

at::Tensor device_ids(const Sequence& ids, at::Device device) {
  return at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong).to(device);
}

// Attention's widths (a prefill's tokens, a step's visible slots) grow in steps of this many: cuDNN's attention builds
// a plan for each new shape, and passes then see a few shapes, not one per length.
constexpr int64_t kShapeStep = 64;

int64_t rounded_up(int64_t value, int64_t step) { return (value + step - 1) / step * step; }

}  // namespace

int64_t step_visible_slots(bool fused, int64_t reach, int64_t capacity) {
  if (!fused) return std::min(capacity, rounded_up(reach, kShapeStep));
  return reach <= model::fused::kCachedAttentionShortSlots ? std::min(capacity, model::fused::kCachedAttentionShortSlots)
                                                            : capacity;
}

IncrementalReader::IncrementalReader(const model::TransformerModel& model, const Request* request, Sequence suffix,
                                     const model::StreamWrites* writes, std::vector<Request> token_reads)
    : model_(model),
      request_(request),
      suffix_(std::move(suffix)),
      writes_(writes),
      token_reads_(std::move(token_reads)),
      fused_attention_(model::cached_attention_is_fused(model.config(), model.device(), model.dtype(), step_span())),
      graphs_(model) {
  graphs_.capture_new_keys_at_once(fused_attention_);
  const model::ModelConfig& c = model.config();
  if (model.loaded_layers() != c.num_layers || !model.has_final_norm()) {
    fail_input("generation needs every layer of the model and its final norm loaded");
  }
  if (request_ != nullptr) {
    if (request_->position != Position::kLast) {
      fail_input("reading generated tokens needs probes trained on the last token (these used position '{}')",
                 position_name(request_->position));
    }
    check_site(request_->site, request_->position, request_->layers, c);
  }
  model.check_inputs(suffix_);
  suffix_ids_ = device_ids(suffix_, model.device());
  if (request_ != nullptr) {
    const auto last = static_cast<int64_t>(suffix_.size());  // the suffix's last token, after the new one
    step_reader_ = std::make_unique<SiteReader>(*request_, model.device(), [last](const at::Tensor& values) {
      return values.select(1, last).to(at::kFloat);
    });
  }
  hook_step_readers();
}

void IncrementalReader::hook_step_readers() {
  std::vector<const SiteReader*> readers;
  if (step_reader_) readers.push_back(step_reader_.get());
  for (const Request& read : token_reads_) {
    check_site(read.site, Position::kLast, read.layers, model_.config());
    token_readers_.push_back(std::make_unique<SiteReader>(read, model_.device(), [](const at::Tensor& values) {
      return values.select(1, 0).to(at::kFloat);  // the new token, before the suffix
    }));
    readers.push_back(token_readers_.back().get());
  }
  for (const SiteReader* reader : readers) step_sites_ |= reader->hook_sites();
  // The readers live on the heap, as long as this reader: the hook holds them, not `this`.
  step_hook_ = [readers](Site site, int64_t layer, const at::Tensor& values) {
    for (const SiteReader* reader : readers) reader->hook()(site, layer, values);
  };
}

void IncrementalReader::set_writes(const model::StreamWrites* writes) {
  writes_ = writes;
  ++epoch_;
}

// The cache is allocated whole for every position up front: one that cannot fit the memory of the devices its
// layers sit on is refused naming the flag, before LibTorch's allocation fails with a C++ backtrace.
void IncrementalReader::check_cache_memory(int64_t batch, double capacity, int64_t new_tokens) const {
  const model::ModelConfig& config = model_.config();
  std::map<std::string, std::pair<double, at::Device>> needed;  // by device
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    const double per_layer = model::layer_cache_bytes(config, layer, static_cast<double>(batch), capacity,
                                                      static_cast<double>(c10::elementSize(model_.dtype())));
    at::Device device = model_.layer_device(layer);
    auto [entry, added] = needed.try_emplace(device.str(), 0.0, device);
    entry->second.first += per_layer;
  }
  for (const auto& [name, need] : needed) {
    const auto memory = static_cast<double>(device::memory_for_tensors(need.second));
    if (memory > 0 && need.first > memory) {
      fail_usage("--max-new-tokens {}: the generation cache (keys and values of every layer for {} prompt{} and {:.0f} "
                 "positions) needs {:.1f} GB on {}, more than its {:.1f} GB of memory; ask for fewer new tokens",
                 new_tokens, batch, batch == 1 ? "" : "s", capacity, need.first / 1e9, name, memory / 1e9);
    }
  }
}

at::Tensor IncrementalReader::start(const std::vector<Sequence>& prompts, int64_t new_tokens) {
  if (prompts.empty()) fail_input("no prompts to generate from");
  c10::InferenceMode inference_mode;
  const auto batch = static_cast<int64_t>(prompts.size());
  int64_t longest = 0;
  for (const Sequence& prompt : prompts) {
    if (prompt.empty()) fail_input("an empty prompt: generation needs at least one token to start from");
    longest = std::max<int64_t>(longest, static_cast<int64_t>(prompt.size()));
  }
  const auto suffix_length = request_ != nullptr ? static_cast<int64_t>(suffix_.size()) : 0;
  for (const Sequence& prompt : prompts) model_.check_inputs(prompt);
  // In double: --max-new-tokens may be any int64, and the sum must not wrap before it is refused.
  const double positions = static_cast<double>(longest) + static_cast<double>(new_tokens) + static_cast<double>(suffix_length);
  const model::ModelConfig& config = model_.config();
  // Learned positions (GPT-2) bound every position a step reads, the suffix's included; rotary models may run past
  // max_position_embeddings, as transformers lets them.
  if (config.features.learned_positions && positions > static_cast<double>(config.max_positions)) {
    fail_usage("the longest prompt ({} tokens), {} new tokens and the probes' prompt suffix ({} tokens) need {:.0f} "
               "positions, more than the model's {}: ask for fewer new tokens (--max-new-tokens)",
               longest, new_tokens, suffix_length, positions, config.max_positions);
  }
  // Right-padded: padding sits after each prompt, in slots its generated tokens overwrite before reading them. On a
  // GPU the prompts' pass is a multiple of kShapeStep tokens wide (15 streams arriving together joined in 55 to 91 ms
  // where their prompts' length was new, in 9 to 14 ms where it was not: bench/results/streams_h200_2026-11-30.md).
  int64_t width = longest;
  if (model_.device().is_cuda()) {
    width = rounded_up(longest, kShapeStep);
    if (config.features.learned_positions) width = std::max(longest, std::min<int64_t>(width, config.max_positions));
  }
  // Checked in double, as `positions` is: the slots are summed in int64 once they fit the memory.
  check_cache_memory(batch, std::max(static_cast<double>(width), positions + 1), new_tokens);
  capacity_ = std::max(width, longest + new_tokens + suffix_length + 1);
  ++epoch_;

  cache_ = model_.empty_cache(batch, capacity_);
  at::Tensor ids = at::zeros({batch, width}, at::kLong), lengths = at::empty({batch}, at::kLong);
  for (int64_t b = 0; b < batch; ++b) {
    const Sequence& prompt = prompts[static_cast<size_t>(b)];
    std::copy(prompt.begin(), prompt.end(), ids.data_ptr<int64_t>() + b * width);
    lengths.data_ptr<int64_t>()[b] = static_cast<int64_t>(prompt.size());
  }
  lengths_ = lengths.to(model_.device());
  longest_ = longest;
  model::ForwardPass pass;
  pass.input_ids = ids.to(model_.device());
  pass.sequence_lengths = lengths_;
  pass.final_norm = true;
  pass.cache = &cache_;
  pass.cache_visible = width;
  pass.commit_tokens = lengths_;  // not the padding after a prompt
  pass.writes = writes_;
  at::Tensor hidden = model_.forward(pass);  // [B, T, hidden]
  at::Tensor last = (lengths_ - 1).view({batch, 1, 1}).expand({batch, 1, hidden.size(2)});
  return hidden.gather(1, last).squeeze(1).to(at::kFloat);
}

IncrementalReader::Step IncrementalReader::step(const at::Tensor& tokens, const at::Tensor& advance) {
  if (!lengths_.defined()) fail_input("IncrementalReader::step before start");
  c10::InferenceMode inference_mode;
  const int64_t batch = tokens.size(0);
  const bool reading = request_ != nullptr;
  const int64_t span = step_span();
  if (longest_ + span > capacity_) fail_input("the generation cache is full ({} positions)", capacity_);
  auto long_options = at::TensorOptions().dtype(at::kLong).device(model_.device());
  model::ForwardPass pass;
  pass.input_ids = reading ? at::cat({tokens.view({batch, 1}), suffix_ids_.unsqueeze(0).expand({batch, -1})}, 1)
                           : tokens.view({batch, 1});
  pass.positions = lengths_.unsqueeze(1) + at::arange(span, long_options).unsqueeze(0);
  // A length-dependent rope (longrope) chooses its factors as transformers' generate does for the new token.
  pass.sequence_lengths = lengths_ + 1;
  pass.final_norm = true;
  pass.cache = &cache_;
  pass.commit_tokens = advance.to(at::kLong);  // the new token of a row that goes on, never the suffix
  pass.writes = writes_;
  pass.cache_visible = step_visible_slots(fused_attention_, longest_ + span, capacity_);
  std::vector<at::Tensor> outputs = graphs_.run({epoch_, batch, span, pass.cache_visible}, pass,
                                                [&](model::ForwardPass& p) { return run_step(p); });
  Step step{outputs[0], reading ? outputs[1] : at::Tensor(), {}};
  step.token_rows.assign(outputs.begin() + (reading ? 2 : 1), outputs.end());
  lengths_ = lengths_ + advance.to(at::kLong);
  longest_ += 1;
  return step;
}

std::vector<at::Tensor> IncrementalReader::run_step(model::ForwardPass& pass) const {
  if (step_sites_ != 0) {
    pass.hook = &step_hook_;
    pass.hook_sites = step_sites_;
  }
  std::vector<at::Tensor> outputs{model_.forward(pass).select(1, 0).to(at::kFloat)};
  if (step_reader_) outputs.push_back(step_reader_->stacked());
  for (const auto& reader : token_readers_) outputs.push_back(reader->stacked().select(1, 0));
  return outputs;
}

namespace {

// `cache` [B, kv_heads, slots, head_dim] with zeros after its slots up to `capacity` (undefined stays so).
at::Tensor grown(const at::Tensor& cache, int64_t capacity) {
  if (!cache.defined() || cache.size(2) == capacity) return cache;
  return at::cat({cache, at::zeros({cache.size(0), cache.size(1), capacity - cache.size(2), cache.size(3)}, cache.options())}, 2);
}

}  // namespace

at::Tensor IncrementalReader::join(const std::vector<Sequence>& prompts, int64_t new_tokens,
                                   const model::StreamWrites* writes) {
  c10::InferenceMode inference_mode;
  IncrementalReader arriving(model_, request_, suffix_, writes);
  // On a GPU the prompts run with copies of the last one up to a multiple of 16 rows (16 for up to 16 prompts): cuDNN
  // builds an attention plan for each new number of rows in a pass, which took 100-230 ms where 16 streams arrived
  // as 2 + 14. Passes of powers of two instead (8 + 4 + 2 + 1 of 15) brought 16 streams' first tokens 20-35 ms
  // later than one padded pass (bench/results/streams_h200_2026-11-30b.md). Rows' writes (each stream's steering)
  // have no rows for copies: those prompts run as they come.
  std::vector<Sequence> padded = prompts;
  if (model_.device().is_cuda() && writes == nullptr && prompts.size() > 1) {
    padded.resize(static_cast<size_t>(rounded_up(static_cast<int64_t>(prompts.size()), 16)), prompts.back());
  }
  at::Tensor hidden = arriving.start(padded, new_tokens);
  if (padded.size() > prompts.size()) {
    // The copies leave; the longest prompt stays what it was, as each copy repeats a kept one.
    arriving.select_rows(at::arange(static_cast<int64_t>(prompts.size()), at::kLong));
    hidden = hidden.narrow(0, 0, static_cast<int64_t>(prompts.size()));
  }
  constexpr int64_t kSlots = 64;
  const int64_t capacity = rounded_up(std::max(capacity_, arriving.capacity_), kSlots);
  append_rows(arriving, capacity);
  return hidden;
}

void IncrementalReader::append_rows(const IncrementalReader& other, int64_t capacity) {
  // Built apart and assigned at the end: a failure (the grown caches' memory) leaves the rows as they were.
  const bool empty = rows() == 0;
  model::KvCache cache = empty ? model::KvCache{} : cache_;
  at::Tensor lengths = empty ? other.lengths_ : at::cat({lengths_, other.lengths_});
  // Keys and values grow to the capacity; the states of recurrent layers have no slots.
  auto join = [&](std::vector<at::Tensor>& mine, const std::vector<at::Tensor>& theirs, bool slots) {
    for (size_t layer = 0; layer < theirs.size(); ++layer) {
      at::Tensor added = slots ? grown(theirs[layer], capacity) : theirs[layer];
      if (mine.size() <= layer) {
        mine.push_back(added);
      } else if (added.defined()) {
        mine[layer] = at::cat({slots ? grown(mine[layer], capacity) : mine[layer], added}, 0);
      }
    }
  };
  join(cache.keys, other.cache_.keys, true);
  join(cache.values, other.cache_.values, true);
  join(cache.conv_states, other.cache_.conv_states, false);
  join(cache.recurrent_states, other.cache_.recurrent_states, false);
  cache_ = std::move(cache);
  lengths_ = lengths;
  longest_ = empty ? other.longest_ : std::max(longest_, other.longest_);
  capacity_ = capacity;
  ++epoch_;
}

void IncrementalReader::keep_rows(const std::vector<int64_t>& rows) {
  c10::InferenceMode inference_mode;
  ++epoch_;
  if (rows.empty()) {
    cache_ = {};
    lengths_ = at::Tensor();
    longest_ = capacity_ = 0;
    return;
  }
  select_rows(at::tensor(rows, at::kLong));
  longest_ = lengths_.max().item<int64_t>();
}

void IncrementalReader::select_rows(const at::Tensor& kept) {
  for (std::vector<at::Tensor>* caches : {&cache_.keys, &cache_.values, &cache_.conv_states, &cache_.recurrent_states}) {
    for (at::Tensor& cache : *caches) {
      if (cache.defined()) cache = cache.index_select(0, kept.to(cache.device()));
    }
  }
  lengths_ = lengths_.index_select(0, kept.to(lengths_.device()));
}

}  // namespace probekit::readout
