#include "capture/outputs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>

#include "common/error.h"
#include "common/files.h"
#include "common/outputs.h"
#include "common/sha256.h"
#include "model/weights.h"

namespace probekit::capture {

using activations::Split;

namespace {

// What to do with one layer file given what is on disk: start it, resume it, keep it, or refuse.
// Returns true when the file is settled (resumed or kept complete), false when it is to be created.
bool settle_existing(const CaptureOptions& options, LayerOutput& out, const activations::FileAttributes& attributes,
                     Batching* batching) {
  std::string partial = activations::partial_path_for(out.path);
  for (const std::string* path : {&out.path, &partial}) check_output_file(*path, true);  // never a device or FIFO
  bool complete = is_regular_file(out.path), interrupted = is_regular_file(partial);
  if (options.overwrite) {
    // The complete file stays until its successor is complete (finish() renames the new file over it), so a failed or
    // interrupted --overwrite run leaves the earlier capture whole; an earlier interrupted run's partial file goes.
    std::remove(partial.c_str());
    return false;
  }
  if (options.resume && interrupted) {
    if (activations::has_progress_record(out.path)) {
      out.writer = activations::ActivationWriter::resume(out.path, attributes);
      *batching = Batching::decode(out.writer->attributes().batching);
      return true;
    }
    std::remove(partial.c_str());  // killed while being created: nothing was committed
    interrupted = false;
  }
  // A complete file kept by --resume must be this run's: one left by an --overwrite run killed before its first commit
  // is the earlier capture's.
  if (options.resume && complete) {
    std::string difference = attributes.identity_difference(activations::read_attributes(out.path));
    if (!difference.empty()) fail("{} is complete but {}; use --overwrite to replace it", out.path, difference);
    return true;
  }
  if (complete) fail("{} already exists; pass --overwrite to replace it (or --resume to keep complete files)", out.path);
  if (interrupted) {
    fail("{} is an interrupted capture; pass --resume to continue it or --overwrite to start again", partial);
  }
  return false;
}

}  // namespace

std::vector<LayerOutput> open_outputs(const CaptureOptions& options, const std::string& dir,
                                      const std::vector<int64_t>& layers, activations::FileAttributes attributes,
                                      const std::array<activations::SplitLayout, 3>& layouts, Batching* batching) {
  std::vector<LayerOutput> outputs;
  std::vector<bool> settled;
  make_directories(dir);
  if (!options.overwrite) refuse_other_captures(dir, layers, attributes, true);
  for (int64_t layer : layers) {
    LayerOutput out;
    out.layer = layer;
    out.path = dir + "/" + activations::layer_file_name(layer);
    attributes.layer = layer;
    settled.push_back(settle_existing(options, out, attributes, batching));
    outputs.push_back(std::move(out));
  }
  attributes.batching = batching->encode();
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (settled[i]) continue;
    attributes.layer = outputs[i].layer;
    outputs[i].writer = activations::ActivationWriter::create(outputs[i].path, attributes, layouts, options.gzip);
  }
  return outputs;
}

void refuse_other_layers(const CaptureOptions& options, const std::string& dir, const std::vector<int64_t>& layers) {
  if (!options.overwrite) return;
  for (const std::string& name : list_directory(dir)) {
    const int64_t layer = activations::layer_from_file_name(name);
    if (layer < 0 || std::find(layers.begin(), layers.end(), layer) != layers.end()) continue;
    fail_usage("--overwrite: {}/{} holds layer {}, which this run (layers {}) does not capture: it would stay beside "
               "this run's files, and a trainer given {} would train on both; remove it (or add its layer to "
               "--layers), or capture into another --output-dir",
               dir, name, layer, fmt::join(layers, ","), dir);
  }
}

void refuse_other_captures(const std::string& dir, const std::vector<int64_t>& layers,
                           const activations::FileAttributes& attributes, bool dtype_resolved) {
  for (const std::string& name : list_directory(dir)) {
    const int64_t layer = activations::layer_from_file_name(name);
    if (layer < 0 || std::find(layers.begin(), layers.end(), layer) != layers.end()) continue;
    activations::FileAttributes there = activations::read_attributes(dir + "/" + name);
    there.layers = attributes.layers;
    there.layer = attributes.layer;
    if (!dtype_resolved) there.recipe.dtype = attributes.recipe.dtype;
    const std::string difference = attributes.identity_difference(there);
    if (difference.empty()) continue;
    fail_usage("--output-dir {}: {} (layer {}) {}: the trainers take every layer file of a directory as one capture's; "
               "capture into another --output-dir, or remove it",
               dir, name, layer, difference);
  }
}

void write_window(std::vector<LayerOutput>& outputs, const WindowRows& window, const std::vector<RunItem>& run,
                  const std::array<activations::SplitLayout, 3>& layouts, Position position, int64_t width) {
  const bool per_token = position == Position::kAll;
  for (size_t l = 0; l < outputs.size(); ++l) {
    if (!outputs[l].writer) continue;
    // The window's examples are consecutive rows of at most three splits.
    for (int64_t p = window.begin; p < window.end;) {
      Split split = run[static_cast<size_t>(p)].split;
      int64_t q = p;
      while (q < window.end && run[static_cast<size_t>(q)].split == split) ++q;
      const auto& offsets = layouts[static_cast<size_t>(split)].offsets;
      int64_t first_row = run[static_cast<size_t>(p)].row, last_row = run[static_cast<size_t>(q - 1)].row + 1;
      int64_t file_row = per_token ? offsets[static_cast<size_t>(first_row)] : first_row;
      int64_t rows = per_token ? offsets[static_cast<size_t>(last_row)] - file_row : last_row - first_row;
      const float* data = window.per_layer[l].get() + window.row_start[static_cast<size_t>(p - window.begin)] * width;
      outputs[l].writer->write_rows(split, file_row, rows, data);
      p = q;
    }
  }
  for (LayerOutput& out : outputs) {
    if (out.writer) out.writer->commit(window.end);
  }
}

std::array<activations::SplitLayout, 3> make_layouts(const CapturePlan& plan, Position position,
                                                     const std::vector<std::string>& keep_fields) {
  std::array<activations::SplitLayout, 3> layouts;
  for (auto& layout : layouts) {
    if (position == Position::kAll) layout.offsets.push_back(0);
    for (const std::string& field : keep_fields) layout.metadata[field];
  }
  for (size_t i = 0; i < plan.run.size(); ++i) {
    const data::Example& example = plan.dataset.examples[static_cast<size_t>(plan.run[i].example)];
    activations::SplitLayout& layout = layouts[static_cast<size_t>(plan.run[i].split)];
    layout.labels.push_back(plan.dataset.labels[static_cast<size_t>(plan.run[i].example)]);
    layout.example_index.push_back(example.line);
    for (size_t f = 0; f < keep_fields.size(); ++f) layout.metadata[keep_fields[f]].push_back(example.kept[f]);
    if (position == Position::kAll) {
      layout.offsets.push_back(layout.offsets.back() + plan.rows_of(i, position));
      const std::vector<int32_t> read = plan.read_ids(i);
      layout.token_ids.insert(layout.token_ids.end(), read.begin(), read.end());
      const std::vector<int64_t> positions = plan.read_positions(i);
      layout.positions.insert(layout.positions.end(), positions.begin(), positions.end());
      if (!plan.token_labels.empty()) {
        layout.token_labels.insert(layout.token_labels.end(), plan.token_labels[i].begin(), plan.token_labels[i].end());
      }
    }
  }
  return layouts;
}

activations::FileAttributes file_attributes(const CaptureOptions& options, const CapturePlan& plan,
                                            const std::string& dtype) {
  activations::FileAttributes attributes;
  activations::ReadoutRecipe& recipe = attributes.recipe;
  recipe.model_name = plan.model.resolved.name;
  recipe.model_revision = plan.model.resolved.revision;
  recipe.model_fingerprint = model::Checkpoint::open(plan.model_dir()).fingerprint();
  recipe.site = plan.site;
  if (plan.sae) recipe.sae = activations::SaeReading{*options.sae_site, plan.sae_top_k, plan.sae->record()};
  recipe.position = options.position;
  recipe.prompt_suffix = plan.prompt_suffix;
  recipe.mask = plan.mask;
  recipe.chat_template_sha256 = plan.chat_template_sha256;
  recipe.add_generation_prompt = plan.mask.has_value() && options.add_generation_prompt;
  recipe.max_length = options.max_length;
  if (!plan.mask) recipe.leading_specials = plan.leading_specials;
  recipe.dtype = dtype;
  if (!plan.steering.empty()) recipe.steering = plan.steering.record();
  attributes.layers = plan.layers;
  attributes.label_names = plan.dataset.label_names;
  // An experts row is k ids then k weights, which the file keeps as two [N, k] datasets; sparse latents are as wide
  // as the dictionary.
  attributes.hidden_size = plan.site == Site::kExperts && !plan.sae ? plan.width / 2 : plan.width;
  if (recipe.sae && recipe.sae->sparse()) attributes.hidden_size = plan.sae->d_sae;
  attributes.dataset = options.dataset_path;
  attributes.dataset_sha256 = plan.dataset.sha256;
  attributes.tool_version = PROBEKIT_VERSION;
  attributes.split_ratios = fmt::format("{},{},{}", options.split.train, options.split.val, options.split.test);
  attributes.seed = static_cast<int64_t>(options.seed);
  attributes.max_examples = options.dataset.max_examples;
  attributes.text_field = options.dataset.text_field;
  attributes.label_field = plan.dataset.label_field;
  attributes.keep_fields = options.dataset.keep_fields;
  attributes.skip_invalid = options.dataset.skip_invalid;
  if (options.shard_count > 1) attributes.shard = fmt::format("{}/{}", options.shard_index, options.shard_count);
  return attributes;
}

}  // namespace probekit::capture
