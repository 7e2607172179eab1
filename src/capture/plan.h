// The first stage of a capture run: everything decided before a model is loaded. The dataset is read and split,
// this shard's examples put in run order (train, val, test), their prompts tokenized, and what the run can refuse
// early refused (an empty split, a text too long for the CPU's memory).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "activations/activation_store.h"
#include "capture/capture_options.h"
#include "data/dataset.h"
#include "device/torch/gpu_utils.h"
#include "loading/model_loading.h"
#include "readout/readout.h"
#include "sae/latent_reading.h"
#include "steering/steering.h"

namespace probekit::capture {

// Examples are run in the order train, val, test, each in the order of its split.
struct RunItem {
  int64_t example = 0;  // index into the dataset's examples
  activations::Split split = activations::Split::kTrain;
  int64_t row = 0;  // the example's row in its split (within this shard)
};

/// This shard's examples in run order, their prompts, and what is known of the model before it loads.
struct CapturePlan {
  loading::ModelSource model;
  data::Dataset dataset;
  std::vector<RunItem> run;
  std::vector<readout::Sequence> ids;  // per run position
  std::vector<int64_t> lengths;
  std::vector<std::vector<uint8_t>> masks;  // conversations: per run position, 1 for each token read; empty for texts
  std::vector<std::vector<int64_t>> token_labels;  // rows with "spans": per run position, each read token's label
  std::string prompt_suffix;                // what follows every text ("" for conversations)
  std::optional<TokenMask> mask;            // conversations: the tokens read
  std::string chat_template_sha256;         // conversations: of the template that rendered them
  std::vector<int64_t> layers;
  Site site = Site::kResidPost;  // where rows are read: --site, or an SAE site's own
  int64_t width = 0;             // values per row (readout::site_width, or an SAE site's LatentReading::width)
  std::vector<sae::SparseAutoencoder> saes;   // --sae, on the host (latent steering names them)
  std::optional<sae::SparseAutoencoder> sae;  // --site sae:NAME: the SAE, on the host
  SaeOutput sae_output = SaeOutput::kLatents;
  int64_t sae_top_k = 0;  // latents stored as their top k; 0: dense
  int64_t leading_specials = 0;
  steering::SteeringVectors steering;  // what the capture writes into the stream

  /// The rows run position `position` stores at `at`: one, or with position all one per token read.
  int64_t rows_of(size_t position, Position at) const;
  /// The ids of the tokens whose rows position all stores: every token of a text, a conversation's masked ones.
  std::vector<int32_t> read_ids(size_t position) const;
  /// Each such token's index in the run position's ids.
  std::vector<int64_t> read_positions(size_t position) const;
  /// Where run position `position`'s text comes from, for messages: "DATASET:LINE", or "text N" for texts given in
  /// memory (no dataset).
  std::string where(size_t position) const;
  const std::string& model_dir() const { return model.resolved.dir; }
  const model::ModelConfig& config() const { return model.config; }
};

/// Refuses options that cannot make a run (the shard, the window, the batch size, the kept fields), before anything
/// is read or loaded.
void check_options(const CaptureOptions& options);

/// Reads the dataset, splits it and picks this shard's examples in run order.
void plan_examples(const CaptureOptions& options, CapturePlan& plan, CaptureSummary& summary);

/// Tokenizes every prompt of the run (text + suffix, cut to --max-length).
void plan_prompts(const CaptureOptions& options, CapturePlan& plan, CaptureSummary& summary);

/// Where rows are read (plan.site, plan.width): --site, checked against the model and the layers; or for --site
/// sae:NAME the one named among the SAEs of --sae (all loaded and checked into plan.saes), the layers its own.
void plan_site(const CaptureOptions& options, CapturePlan& plan);

/// An SAE site's dictionary on one model copy's device and the reading the requests of that copy point at.
struct DeviceSae {
  sae::SparseAutoencoder sae;
  sae::LatentReading reading;
};
/// The plan's SAE placed on `device` for the readout; null when the plan reads no SAE site.
std::unique_ptr<DeviceSae> place_sae(const CapturePlan& plan, at::Device device);

/// Refuses, before the model loads, a text whose attention would not fit the memory of a CPU or of a Mac (MPS),
/// naming the text and the --max-length that fits.
void check_cpu_attention_memory(const CapturePlan& plan, const device::ComputeTarget& target);

}  // namespace probekit::capture
