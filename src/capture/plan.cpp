#include "capture/plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>

#include "chat/chat_template.h"
#include "common/error.h"
#include "common/files.h"
#include "model/transformer.h"
#include "readout/prompts.h"
#include "tokenizer/tokenizer.h"

namespace probekit::capture {

namespace {

using activations::Split;

// The run order and each example's split and row, for the run positions [begin, end) of this shard.
std::vector<RunItem> order_examples(const std::array<std::vector<int64_t>, 3>& splits, int64_t begin, int64_t end) {
  std::vector<RunItem> run;
  int64_t position = 0;
  std::array<int64_t, 3> rows{};
  for (Split split : activations::kSplits) {
    for (int64_t example : splits[static_cast<size_t>(split)]) {
      if (position >= begin && position < end) run.push_back(RunItem{example, split, rows[static_cast<size_t>(split)]++});
      ++position;
    }
  }
  return run;
}

// A split with a share of the examples that comes out empty (too few examples per label) is an error: the
// trainers need examples in all three.
void check_splits_not_empty(const std::array<std::vector<int64_t>, 3>& splits, const data::SplitRatios& ratios,
                            const data::Dataset& dataset) {
  const double shares[] = {ratios.train, ratios.val, ratios.test};
  for (Split split : activations::kSplits) {
    auto index = static_cast<size_t>(split);
    if (shares[index] == 0 || !splits[index].empty()) continue;
    std::map<std::string, int64_t> counts;
    for (const data::Example& example : dataset.examples) ++counts[example.label];
    std::vector<std::string> described;
    for (const auto& [label, count] : counts) described.push_back(fmt::format("{} ({})", label, count));
    fail_input("{}: the {} split comes out empty: with --split {},{},{} each label needs more examples than these "
               "have: {}; add examples or change --split",
               dataset.path, activations::split_name(split), ratios.train, ratios.val, ratios.test,
               fmt::join(described, ", "));
  }
}

}  // namespace

std::string CapturePlan::where(size_t position) const {
  if (run.empty()) return fmt::format("text {}", position);
  return fmt::format("{}:{}", dataset.path, dataset.examples[static_cast<size_t>(run[position].example)].line + 1);
}

int64_t CapturePlan::rows_of(size_t position, Position at) const {
  if (at != Position::kAll) return 1;
  if (masks.empty()) return lengths[position];
  return std::count(masks[position].begin(), masks[position].end(), 1);
}

std::vector<int32_t> CapturePlan::read_ids(size_t position) const {
  if (masks.empty()) return ids[position];
  std::vector<int32_t> read;
  for (size_t t = 0; t < ids[position].size(); ++t) {
    if (masks[position][t]) read.push_back(ids[position][t]);
  }
  return read;
}

std::vector<int64_t> CapturePlan::read_positions(size_t position) const {
  std::vector<int64_t> read;
  for (size_t t = 0; t < ids[position].size(); ++t) {
    if (masks.empty() || masks[position][t]) read.push_back(static_cast<int64_t>(t));
  }
  return read;
}

void plan_site(const CaptureOptions& options, CapturePlan& plan) {
  plan.saes = sae::load_saes(options.saes, plan.config());
  if (!options.sae_site) {
    plan.site = options.site;
    readout::check_site(plan.site, options.position, plan.layers, plan.config());
    plan.width = readout::site_width(plan.site, plan.config());
    return;
  }
  const SaeSite& site = *options.sae_site;
  plan.sae = sae::find_sae(plan.saes, site.name, "--site " + site.text());
  // One layer's file: other layers named would silently make none.
  if (!options.layers.empty() && plan.layers != std::vector<int64_t>{plan.sae->layer}) {
    fail_usage("--layers {}: SAE '{}' reads layer {} alone (give --layers {}, or leave --layers out)", options.layers,
               site.name, plan.sae->layer, plan.sae->layer);
  }
  plan.layers = {plan.sae->layer};
  plan.site = plan.sae->site;
  plan.sae_output = site.output;
  plan.sae_top_k = options.sae_storage.stored_top_k(site, plan.sae->d_sae);
  readout::check_site(plan.site, options.position, plan.layers, plan.config());
  plan.width = sae::LatentReading{&*plan.sae, plan.sae_output, plan.sae_top_k}.width();
}

std::unique_ptr<DeviceSae> place_sae(const CapturePlan& plan, at::Device device) {
  if (!plan.sae) return nullptr;
  auto placed = std::make_unique<DeviceSae>();
  placed->sae = plan.sae->to(device);
  placed->reading = {&placed->sae, plan.sae_output, plan.sae_top_k};
  return placed;
}

namespace {

// Each --keep-fields name becomes a column, the HDF5 dataset metadata/NAME: a name given twice would make one column of
// twice the values, and an empty name, "." or one holding '/' is not a dataset's name (HDF5 failed on it once the
// model had loaded, leaving a .partial file).
void check_keep_fields(const std::vector<std::string>& fields) {
  std::set<std::string> named;
  for (const std::string& field : fields) {
    if (field.empty() || field == "." || field.find('/') != std::string::npos) {
      fail_usage("--keep-fields: '{}' cannot name a metadata column (stored as metadata/NAME in the HDF5 files, a name "
                 "that is not empty, not '.' and holds no '/')",
                 field);
    }
    if (!named.insert(field).second) fail_usage("--keep-fields: '{}' is named twice; each field makes one column", field);
  }
}

}  // namespace

void check_options(const CaptureOptions& options) {
  if (options.shard_count < 1 || options.shard_index < 0 || options.shard_index >= options.shard_count) {
    fail_usage("--shard {}/{}: expected I/N with 0 <= I < N", options.shard_index, options.shard_count);
  }
  if (options.window <= 0) fail_usage("--window must be positive");
  if (options.batch_size < 0 || options.batch_size > kMaxBatchSize) {
    fail_usage("--batch-size {}: expected 0 (chosen from device memory) to {} examples per forward pass",
               options.batch_size, kMaxBatchSize);
  }
  check_keep_fields(options.dataset.keep_fields);
  options.sae_storage.check(options.sae_site, options.sae_site ? options.sae_site->text() : site_name(options.site));
}

namespace {

// --skip-invalid with conversations: a row the chat template refuses, whose content it rewrites, or with no token in
// the mask is skipped and reported like a malformed line, before the split (so that the splits hold what is read).
// The model's tokenizer and template are read here for that; plan_prompts renders the rows kept again.
void skip_unreadable_conversations(const CaptureOptions& options, CapturePlan& plan) {
  data::Dataset& dataset = plan.dataset;
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_file(plan.model_dir());
  const chat::ChatTemplate chat = chat::ChatTemplate::from_tokenizer_dir(plan.model_dir());
  const readout::PromptBuilder builder(tok, "", {options.max_length, fmt::format("--max-length {} tokens", options.max_length)});
  std::vector<data::Example> kept;
  for (size_t i = 0; i < dataset.examples.size(); ++i) {
    data::Example& example = dataset.examples[i];
    try {
      builder.build_conversations({example.messages}, chat, options.mask.value_or(TokenMask::kAssistant),
                                  options.add_generation_prompt,
                                  [&](size_t) { return fmt::format("{}:{}", dataset.path, example.line + 1); });
    } catch (const std::invalid_argument& e) {
      dataset.skipped.push_back(data::SkippedLine{example.line, e.what()});
      continue;
    }
    kept.push_back(std::move(example));
  }
  std::sort(dataset.skipped.begin(), dataset.skipped.end(),
            [](const data::SkippedLine& a, const data::SkippedLine& b) { return a.line < b.line; });
  if (kept.empty()) fail_input("{}: no conversation can be read ({} skipped)", dataset.path, dataset.skipped.size());
  dataset.examples = std::move(kept);
  data::reindex_labels(dataset);
}

}  // namespace

void plan_examples(const CaptureOptions& options, CapturePlan& plan, CaptureSummary& summary) {
  plan.dataset = data::read_dataset(options.dataset_path, options.dataset);
  if (plan.dataset.conversations && options.dataset.skip_invalid) skip_unreadable_conversations(options, plan);
  if (options.resume && plan.dataset.from_stream) {
    fail_usage("--resume with --dataset {}: a dataset read from standard input or a pipe cannot be read again to check "
               "that it is the one the files were made from; write it to a file and capture from that",
               options.dataset_path);
  }
  summary.skipped = plan.dataset.skipped;
  summary.label_names = plan.dataset.label_names;
  std::vector<std::string> label_of_example;
  for (const data::Example& example : plan.dataset.examples) label_of_example.push_back(example.label);
  data::check_label_file_names(plan.dataset.label_names, options.dataset_path);
  std::set<int64_t> present(plan.dataset.labels.begin(), plan.dataset.labels.end());
  if (present.size() < plan.dataset.label_names.size()) {
    spdlog::info("{}: {} of the reference's {} cognitive actions occur; the files list all {} (label_names), indexed "
                 "as the reference indexes them",
                 options.dataset_path, present.size(), plan.dataset.label_names.size(), plan.dataset.label_names.size());
  }
  auto splits = data::stratified_split(label_of_example, options.split, options.seed);
  check_splits_not_empty(splits, options.split, plan.dataset);
  auto total = static_cast<int64_t>(plan.dataset.examples.size());
  int64_t begin = total * options.shard_index / options.shard_count;
  int64_t end = total * (options.shard_index + 1) / options.shard_count;
  plan.run = order_examples(splits, begin, end);
  if (plan.run.empty()) fail_input("shard {}/{} of {} examples is empty", options.shard_index, options.shard_count, total);
  for (const RunItem& item : plan.run) ++summary.split_sizes[static_cast<size_t>(item.split)];
  summary.examples = static_cast<int64_t>(plan.run.size());
}

namespace {

// The prompt suffix of the run: the one given or the reference's for texts; none for conversations, whose template
// writes the turns (a suffix given with them is refused). --mask with texts is refused too.
std::string conversation_suffix(const CaptureOptions& options, const data::Dataset& dataset) {
  if (!dataset.conversations) {
    if (options.mask || options.add_generation_prompt) {
      fail_usage("{} reads conversations (rows with \"messages\"); {} holds texts",
                 options.mask ? "--mask" : "--add-generation-prompt", options.dataset_path);
    }
    return options.prompt_suffix.value_or(activations::kDefaultPromptSuffix);
  }
  if (options.prompt_suffix) {
    fail_usage("--prompt-suffix: {} holds conversations, which the chat template renders with its own turn markers; a "
               "suffix does not apply to them (leave the flag out)",
               options.dataset_path);
  }
  return "";
}

std::vector<readout::Prompt> text_prompts(const readout::PromptBuilder& builder, const CapturePlan& plan) {
  std::vector<std::string> texts;
  texts.reserve(plan.run.size());
  for (const RunItem& item : plan.run) texts.push_back(plan.dataset.examples[static_cast<size_t>(item.example)].text);
  return builder.build(texts);
}

std::vector<readout::Prompt> conversation_prompts(const CaptureOptions& options, const readout::PromptBuilder& builder,
                                                  CapturePlan& plan) {
  const chat::ChatTemplate chat = chat::ChatTemplate::from_tokenizer_dir(plan.model_dir());
  plan.mask = options.mask.value_or(TokenMask::kAssistant);
  plan.chat_template_sha256 = chat.source_sha256();
  std::vector<std::string> conversations;
  conversations.reserve(plan.run.size());
  for (const RunItem& item : plan.run) {
    conversations.push_back(plan.dataset.examples[static_cast<size_t>(item.example)].messages);
  }
  return builder.build_conversations(conversations, chat, *plan.mask, options.add_generation_prompt,
                                     [&plan](size_t i) { return plan.where(i); });
}

// Learned position embeddings (GPT-2) end at max_position_embeddings: a longer prompt is refused here, where the
// flag that cuts it is capture's own, naming the text.
void check_learned_positions(const CapturePlan& plan, const std::vector<readout::Prompt>& prompts) {
  const model::ModelConfig& config = plan.config();
  if (!config.features.learned_positions) return;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (static_cast<int64_t>(prompts[i].ids.size()) > config.max_positions) {
      const data::Example& example = plan.dataset.examples[static_cast<size_t>(plan.run[i].example)];
      fail_usage("{}:{}: this text's prompt is {} tokens, more than the model's {} positions (learned position "
                 "embeddings, none past them): cut long texts with --max-length {}",
                 plan.dataset.path, example.line + 1, prompts[i].ids.size(), config.max_positions, config.max_positions);
    }
  }
}

// Rows with "spans": each read token's label (the span's it overlaps, else the row's), stored by position all.
void plan_token_labels(const CaptureOptions& options, CapturePlan& plan, const std::vector<readout::Prompt>& prompts) {
  if (options.position != Position::kAll) {
    spdlog::warn("{}: the rows' spans label tokens, which only --position all stores (token_labels); at position {} "
                 "each example keeps its row's label", options.dataset_path, position_name(options.position));
    return;
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const data::Example& example = plan.dataset.examples[static_cast<size_t>(plan.run[i].example)];
    const std::vector<int64_t> all =
        data::token_labels(example, plan.dataset.label_names, prompts[i].token_bytes, prompts[i].content_begin);
    plan.token_labels.emplace_back();
    for (size_t t = 0; t < all.size(); ++t) {
      if (prompts[i].mask[t]) plan.token_labels.back().push_back(all[t]);
    }
  }
}

}  // namespace

void plan_prompts(const CaptureOptions& options, CapturePlan& plan, CaptureSummary& summary) {
  if (!is_regular_file(plan.model_dir() + "/tokenizer.json")) fail("{}: no tokenizer.json", plan.model_dir());
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_file(plan.model_dir());
  plan.prompt_suffix = conversation_suffix(options, plan.dataset);
  readout::PromptBuilder builder(tok, plan.prompt_suffix,
                                 {options.max_length, fmt::format("--max-length {} tokens", options.max_length)});
  plan.leading_specials = builder.leading_specials();
  std::vector<readout::Prompt> prompts =
      plan.dataset.conversations ? conversation_prompts(options, builder, plan) : text_prompts(builder, plan);
  builder.warn_if_cut(prompts);
  check_learned_positions(plan, prompts);
  if (plan.dataset.labelled_spans) plan_token_labels(options, plan, prompts);
  for (readout::Prompt& prompt : prompts) {
    summary.truncated += prompt.cut > 0 ? 1 : 0;
    plan.lengths.push_back(static_cast<int64_t>(prompt.ids.size()));
    plan.ids.push_back(std::move(prompt.ids));
    if (plan.dataset.conversations) plan.masks.push_back(std::move(prompt.mask));
  }
}

// A text whose attention would not fit the memory of a CPU or a Mac (model::attention_past_memory) is refused before
// the model loads, naming the text and the --max-length that fits. CUDA GPUs take the memory-efficient attention and
// retry out-of-memory batches in halves.
void check_cpu_attention_memory(const CapturePlan& plan, const device::ComputeTarget& target) {
  auto longest = std::max_element(plan.lengths.begin(), plan.lengths.end());
  if (longest == plan.lengths.end()) return;
  const auto past = model::attention_past_memory(plan.config(), target.device, *longest);
  if (!past) return;
  fail_input("{}: this text's prompt is {} tokens; attention over it needs about {:.0f} GB on the {}, more than "
             "half of its {:.0f} GB of memory: cut long texts with --max-length {} (or less)",
             plan.where(static_cast<size_t>(longest - plan.lengths.begin())), *longest, past->needed / 1e9,
             target.device.is_mps() ? "Mac (MPS shares the system's memory)" : "CPU", past->memory / 1e9,
             past->fitting_tokens);
}

}  // namespace probekit::capture
