#include "readout/readout.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <map>
#include <utility>

#include "common/error.h"
#include "device/torch/transfers.h"
#include "readout/pooling.h"
#include "readout/site_reader.h"

namespace probekit::readout {

namespace {

// Continuations of read_prefixes run per forward pass (bounds the keys and values held at once).
constexpr int64_t kPrefixesPerPass = 64;

// A right-padded batch on the model's device.
struct PaddedBatch {
  at::Tensor ids;      // [B, T] int64
  at::Tensor lengths;  // [B] int64
};

PaddedBatch pad(const std::vector<Sequence>& sequences, at::Device device) {
  auto count = static_cast<int64_t>(sequences.size());
  int64_t longest = 0;
  for (const Sequence& s : sequences) longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
  at::Tensor ids = at::zeros({count, longest}, at::kLong), lengths = at::empty({count}, at::kLong);
  auto* ids_data = ids.data_ptr<int64_t>();
  auto* length_data = lengths.data_ptr<int64_t>();
  for (int64_t b = 0; b < count; ++b) {
    const Sequence& s = sequences[static_cast<size_t>(b)];
    std::copy(s.begin(), s.end(), ids_data + b * longest);
    length_data[b] = static_cast<int64_t>(s.size());
  }
  return {device::to_device(ids, device), device::to_device(lengths, device)};
}

// Sequences one after another in one row [1, N], positions restarting at 0 for each, on the model's device.
struct PackedBatch {
  at::Tensor ids, positions;  // [1, N] int64
  at::Tensor last_rows;       // [B] int64: each sequence's last token in the row
  at::Tensor padded_rows;     // [N] int64: where each token goes in a right-padded [B * longest] layout
  at::Tensor lengths;         // [B] int64
  int64_t longest = 0;
  model::PackedSequences layout;
};

PackedBatch pack(const std::vector<Sequence>& sequences, at::Device device) {
  const auto count = static_cast<int64_t>(sequences.size());
  PackedBatch batch;
  int64_t total = 0;
  for (const Sequence& s : sequences) {
    batch.layout.lengths.push_back(static_cast<int64_t>(s.size()));
    batch.longest = std::max<int64_t>(batch.longest, static_cast<int64_t>(s.size()));
    total += static_cast<int64_t>(s.size());
  }
  at::Tensor ids = at::empty({1, total}, at::kLong), positions = at::empty({1, total}, at::kLong);
  at::Tensor padded_rows = at::empty({total}, at::kLong), last_rows = at::empty({count}, at::kLong);
  at::Tensor cumulative = at::empty({count + 1}, at::kInt);
  auto* id = ids.data_ptr<int64_t>();
  auto* position = positions.data_ptr<int64_t>();
  auto* padded = padded_rows.data_ptr<int64_t>();
  int64_t start = 0;
  cumulative.data_ptr<int32_t>()[0] = 0;
  for (int64_t b = 0; b < count; ++b) {
    const Sequence& s = sequences[static_cast<size_t>(b)];
    for (size_t t = 0; t < s.size(); ++t) {
      id[start + static_cast<int64_t>(t)] = s[t];
      position[start + static_cast<int64_t>(t)] = static_cast<int64_t>(t);
      padded[start + static_cast<int64_t>(t)] = b * batch.longest + static_cast<int64_t>(t);
    }
    start += static_cast<int64_t>(s.size());
    last_rows.data_ptr<int64_t>()[b] = start - 1;
    cumulative.data_ptr<int32_t>()[b + 1] = static_cast<int32_t>(start);
  }
  batch.ids = device::to_device(ids, device);
  batch.positions = device::to_device(positions, device);
  batch.last_rows = device::to_device(last_rows, device);
  batch.padded_rows = device::to_device(padded_rows, device);
  batch.lengths = device::to_device(at::tensor(batch.layout.lengths, at::kLong), device);
  batch.layout.cumulative_lengths = device::to_device(cumulative, device);
  return batch;
}

// A packed pass's values [1, N, width] as a right-padded batch [B, longest, width] (zeros after each sequence).
at::Tensor unpack(const at::Tensor& values, const PackedBatch& batch) {
  const int64_t count = batch.lengths.size(0), width = values.size(2);
  at::Tensor padded = at::zeros({count * batch.longest, width}, values.options());
  padded.index_copy_(0, batch.padded_rows, values[0]);
  return padded.view({count, batch.longest, width});
}

at::Tensor to_device_ids(const Sequence& ids, at::Device device) {
  return at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong).to(device);
}

// `rows` copies of one sequence's ids [rows, T]: activation patching's runs, each row with its own writes.
at::Tensor batch_of(const Sequence& ids, int64_t rows, at::Device device) {
  return to_device_ids(ids, device).unsqueeze(0).expand({rows, -1});
}


}  // namespace

bool packs_sequences(const model::TransformerModel& model, const Request& request) {
  if (request.layout != Layout::kAuto) return request.layout == Layout::kPacked;
  return model::packed_attention_is_fast(model.config(), model.device(), model.dtype());
}

namespace {

at::Tensor read_packed_rows(const model::TransformerModel& model, const std::vector<Sequence>& sequences,
                            const Request& request, const std::vector<std::vector<uint8_t>>& masks) {
  if (model::longest_short_rope_sequence(model.config()) > 0) {
    fail_input("sequences cannot be packed for a model whose rope depends on the sequence's length (longrope)");
  }
  PackedBatch batch = pack(sequences, model.device());
  const int64_t count = batch.last_rows.size(0);
  const at::Tensor read = masks.empty() ? at::Tensor() : read_tokens(masks, batch.longest, model.device());
  SiteReader reader(request, model.device(), [&](const at::Tensor& values) {
    if (read.defined()) {
      const at::Tensor padded = unpack(values, batch);
      return request.position == Position::kAll ? read_token_rows(padded, read) : pool_read(padded, read, request.position);
    }
    if (request.position == Position::kLast) {
      // The deepest layer gives its last tokens only (last_layer_rows below); where every sequence is one token
      // long, a layer's values are those rows as well.
      return (values.size(1) == count ? values[0] : values[0].index_select(0, batch.last_rows)).to(at::kFloat);
    }
    if (request.position == Position::kAll) return values[0].to(at::kFloat);
    return pool(unpack(values, batch), batch.lengths, request.position, request.skip_leading);
  });
  model::ForwardPass pass;
  pass.input_ids = batch.ids;
  pass.positions = batch.positions;
  pass.packed = &batch.layout;
  if (request.position == Position::kLast && request.site != Site::kResidPre && masks.empty()) {
    pass.last_layer_rows = batch.last_rows;
  }
  reader.attach(pass);
  model.forward(pass);
  return reader.stacked();
}

}  // namespace

at::Tensor read_rows(const model::TransformerModel& model, const std::vector<Sequence>& sequences,
                     const Request& request, const std::vector<std::vector<uint8_t>>& masks) {
  check_site(request.site, request.position, request.layers, model.config());
  for (const Sequence& s : sequences) model.check_inputs(s);
  if (!masks.empty() && masks.size() != sequences.size()) {
    fail_input("{} token masks for {} sequences", masks.size(), sequences.size());
  }
  if (packs_sequences(model, request)) return read_packed_rows(model, sequences, request, masks);
  PaddedBatch batch = pad(sequences, model.device());
  const at::Tensor read = masks.empty() ? at::Tensor() : read_tokens(masks, batch.ids.size(1), model.device());
  SiteReader reader(request, model.device(), [&](const at::Tensor& hidden) {
    if (read.defined()) {
      return request.position == Position::kAll ? read_token_rows(hidden, read) : pool_read(hidden, read, request.position);
    }
    return request.position == Position::kAll ? real_token_rows(hidden, batch.lengths)
                                              : pool(hidden, batch.lengths, request.position, request.skip_leading);
  });
  model::ForwardPass pass;
  pass.input_ids = batch.ids;
  pass.sequence_lengths = batch.lengths;
  reader.attach(pass);
  model.forward(pass);
  return reader.stacked();
}

namespace {

// Rows [first, end) of read_prefixes read as prompts of their own (text[0..t] + suffix), kPrefixesPerPass at a
// time: a recurrent layer (Gated DeltaNet) has no keys and values for the suffix to continue from.
at::Tensor read_prefixes_as_rows(const model::TransformerModel& model, const Sequence& text, const Sequence& suffix,
                                 const Request& request, int64_t first, int64_t end) {
  std::vector<at::Tensor> parts;
  for (int64_t start = first; start < end; start += kPrefixesPerPass) {
    if (request.before_pass) request.before_pass();
    std::vector<Sequence> prompts;
    for (int64_t t = start; t < std::min(end, start + kPrefixesPerPass); ++t) {
      Sequence prompt(text.begin(), text.begin() + t + 1);
      prompt.insert(prompt.end(), suffix.begin(), suffix.end());
      prompts.push_back(std::move(prompt));
    }
    parts.push_back(read_rows(model, prompts, request));
  }
  return at::cat(parts);
}

// Rows [first, end) of read_prefixes: prefixes text[0..t] for t in [first, end), all of whose prompts a rope
// that depends on the length treats alike.
at::Tensor read_prefix_range(const model::TransformerModel& model, const Sequence& text, const Sequence& suffix,
                             const Request& request, int64_t first, int64_t end) {
  const auto suffix_length = static_cast<int64_t>(suffix.size());
  model::ForwardPass text_pass;
  text_pass.input_ids = to_device_ids(Sequence(text.begin(), text.begin() + end), model.device()).unsqueeze(0);
  // Without a suffix, position t of the text itself is what the probes see for prefix t.
  if (suffix.empty()) {
    SiteReader reader(request, model.device(),
                      [&](const at::Tensor& hidden) { return hidden[0].narrow(0, first, end - first).to(at::kFloat); });
    reader.attach(text_pass);
    model.forward(text_pass);
    return reader.stacked();
  }
  if (model::has_recurrent_layers(model.config())) return read_prefixes_as_rows(model, text, suffix, request, first, end);
  model::KvCache cache;
  text_pass.record = &cache;
  text_pass.writes = request.writes;
  text_pass.last_layer = request.layers.back();
  // The keys and values as the longest prompt of the range computes them, the same as in each of its prompts.
  text_pass.sequence_lengths = at::full({1}, end + suffix_length, at::kLong).to(model.device());
  model.forward(text_pass);

  // Continuation t: the suffix at positions t + 1 ... t + S, attending to text positions [0, t].
  auto options = at::TensorOptions().dtype(at::kLong);
  at::Tensor suffix_ids = to_device_ids(suffix, model.device());
  std::vector<at::Tensor> parts;
  for (int64_t start = first; start < end; start += kPrefixesPerPass) {
    if (request.before_pass) request.before_pass();
    int64_t count = std::min(kPrefixesPerPass, end - start);
    at::Tensor prefix_lengths = at::arange(start + 1, start + count + 1, options);
    model::ForwardPass pass;
    pass.input_ids = suffix_ids.unsqueeze(0).expand({count, suffix_length}).contiguous();
    pass.positions = (prefix_lengths.unsqueeze(1) + at::arange(suffix_length, options).unsqueeze(0)).to(model.device());
    pass.prefix = &cache;
    pass.prefix_lengths = prefix_lengths.to(model.device());
    SiteReader reader(request, model.device(),
                      [&](const at::Tensor& hidden) { return hidden.select(1, suffix_length - 1).to(at::kFloat); });
    reader.attach(pass);
    model.forward(pass);
    parts.push_back(reader.stacked());
  }
  return at::cat(parts);
}

}  // namespace

at::Tensor read_prefixes(const model::TransformerModel& model, const Sequence& text, const Sequence& suffix,
                         const Request& request) {
  if (request.position != Position::kLast) {
    fail_input("reading every prefix needs probes trained on the last token (these used position '{}')",
               position_name(request.position));
  }
  check_site(request.site, request.position, request.layers, model.config());
  Sequence longest = text;
  longest.insert(longest.end(), suffix.begin(), suffix.end());
  model.check_inputs(longest);
  const auto tokens = static_cast<int64_t>(text.size()), suffix_length = static_cast<int64_t>(suffix.size());
  // Prefix t's prompt has t + 1 + S tokens. A rope that chooses its factors by the length (longrope) computes
  // the text's keys differently for prompts over its limit than for those under it: the two groups are read
  // apart, each as its prompts would be run alone.
  const int64_t limit = model::longest_short_rope_sequence(model.config());
  const int64_t first_long = limit > 0 ? std::clamp<int64_t>(limit - suffix_length, 0, tokens) : tokens;
  std::vector<at::Tensor> parts;
  if (first_long > 0) parts.push_back(read_prefix_range(model, text, suffix, request, 0, first_long));
  if (first_long < tokens) parts.push_back(read_prefix_range(model, text, suffix, request, first_long, tokens));
  return at::cat(parts);
}

std::vector<at::Tensor> read_next_token_log_probs(const model::TransformerModel& model,
                                                  const std::vector<Sequence>& sequences,
                                                  const std::vector<int64_t>& from, const model::StreamWrites* writes) {
  for (const Sequence& s : sequences) model.check_inputs(s);
  PaddedBatch batch = pad(sequences, model.device());
  model::ForwardPass pass;
  pass.input_ids = batch.ids;
  pass.sequence_lengths = batch.lengths;
  pass.final_norm = true;
  pass.writes = writes;
  // Right padding follows each sequence, which causal attention never lets its real tokens see.
  const at::Tensor hidden = model.forward(pass);
  std::vector<at::Tensor> log_probs;
  for (size_t b = 0; b < sequences.size(); ++b) {
    const int64_t first = from.at(b), last = static_cast<int64_t>(sequences[b].size()) - 1;
    if (first < 0 || first > last) fail_input("next-token positions from {} in a sequence of {} tokens", first, last + 1);
    log_probs.push_back(at::log_softmax(model.logits(hidden[static_cast<int64_t>(b)].narrow(0, first, last - first)), -1));
  }
  return log_probs;
}

HiddenStates read_hidden_states(const model::TransformerModel& model, const Sequence& ids,
                                const model::StreamWrites* writes) {
  model.check_inputs(ids);
  HiddenStates states;
  std::vector<at::Tensor> layers, router_logits;
  model::TensorHook hook = [&](Site site, int64_t, const at::Tensor& t) {
    at::Tensor row = t[0].to(at::kCPU, at::kFloat).contiguous();
    if (site == Site::kEmbeddings) states.embeddings = row;
    if (site == Site::kResidPost) layers.push_back(row);
    if (site == Site::kFinalNorm) states.final_norm = row;
    if (site == Site::kRouter) router_logits.push_back(row);
  };
  model::ForwardPass pass;
  pass.input_ids = to_device_ids(ids, model.device()).unsqueeze(0);
  pass.final_norm = true;
  pass.hook = &hook;
  pass.hook_sites = site_bit(Site::kEmbeddings) | site_bit(Site::kResidPost) | site_bit(Site::kFinalNorm) |
                    site_bit(Site::kRouter);
  pass.writes = writes;
  model.forward(pass);
  states.layers = at::stack(layers).contiguous();
  if (!router_logits.empty()) states.router_logits = at::stack(router_logits).contiguous();
  return states;
}

void check_runnable(const model::TransformerModel& model, const Sequence& ids) {
  if (ids.empty()) fail_input("an empty text has no next token to read");
  if (!model.has_lm_head()) fail_input("reading logits needs the LM head loaded");
  model.check_inputs(ids);
}

SiteRun read_site_run(const model::TransformerModel& model, const Sequence& ids, const std::vector<Site>& sites,
                      const model::StreamWrites* writes, bool gradients) {
  check_runnable(model, ids);
  return std::move(read_site_runs(model, batch_of(ids, 1, model.device()), sites, writes, gradients)[0]);
}

std::vector<SiteRun> read_site_runs(const model::TransformerModel& model, const at::Tensor& input_ids,
                                    const std::vector<Site>& sites, const model::StreamWrites* writes, bool gradients) {
  std::vector<SiteRun> runs(static_cast<size_t>(input_ids.size(0)));
  uint32_t hook_sites = 0;
  for (Site site : sites) {
    if (!site_row(site).writable() || site == Site::kEmbeddings) {
      fail_input("a run is read at decoder sites that take writes, not at {}", site_name(site));
    }
    hook_sites |= site_bit(site);
    for (SiteRun& run : runs) run.values[site].resize(static_cast<size_t>(model.loaded_layers()));
  }
  model::TensorHook hook = [&](Site site, int64_t layer, const at::Tensor& t) {
    for (size_t row = 0; row < runs.size(); ++row) {
      runs[row].values[site][static_cast<size_t>(layer)] = t[static_cast<int64_t>(row)].detach();
    }
  };
  model::ForwardPass pass;
  pass.input_ids = input_ids;
  pass.final_norm = true;
  pass.hook = &hook;
  pass.hook_sites = hook_sites;
  pass.writes = writes;
  pass.gradients = gradients;
  at::Tensor out = model.forward(pass);
  at::AutoGradMode gradient_mode(gradients);
  const at::Tensor logits = model.logits(out.select(1, out.size(1) - 1));
  for (size_t row = 0; row < runs.size(); ++row) runs[row].logits = logits[static_cast<int64_t>(row)];
  return runs;
}

at::Tensor read_last_logits(const model::TransformerModel& model, const Sequence& ids, int64_t rows,
                            const model::StreamWrites& writes) {
  check_runnable(model, ids);
  model::ForwardPass pass;
  pass.input_ids = batch_of(ids, rows, model.device());
  pass.final_norm = true;
  pass.writes = &writes;
  at::Tensor out = model.forward(pass);
  return model.logits(out.select(1, out.size(1) - 1));
}

}  // namespace probekit::readout
