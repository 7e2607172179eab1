// Everything capture_activations can be asked to do, as one struct the tool fills from its flags and the
// tests fill directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "activations/readout_recipe.h"
#include "common/launcher.h"
#include "data/dataset.h"
#include "data/splits.h"
#include "loading/model_loading.h"
#include "steering/steering.h"
#include "readout/prompts.h"
#include "readout/site_reading.h"
#include "sae/sae_flags.h"
#include "sites/sae_site.h"

namespace probekit::capture {

/// The most examples --batch-size may ask for in one forward pass: far past what any device holds, and small enough
/// that the batch's token budget (examples x the longest prompt) cannot overflow.
constexpr int64_t kMaxBatchSize = int64_t{1} << 20;

/// The model and its devices (loading::ModelRequest), and what to capture.
struct CaptureOptions : loading::ModelRequest {
  std::string dataset_path;
  std::string output_dir = "./data/activations";
  std::string layers;  // "8,17,25,33", "all", or empty for n/4, n/2, 3n/4, n-1
  data::DatasetOptions dataset;
  std::optional<std::string> prompt_suffix;  // none given: the reference's suffix for texts (conversations take none)
  std::optional<TokenMask> mask;              // conversations' tokens read (--mask); none given: assistant
  bool add_generation_prompt = false;         // conversations rendered with the template's generation prompt
  data::SplitRatios split;
  uint64_t seed = 42;
  Position position = Position::kLast;
  Site site = Site::kResidPost;
  std::vector<sae::SaeSpec> saes;   // --sae
  std::optional<SaeSite> sae_site;  // --site sae:NAME or sae-error:NAME: read through that SAE instead of `site`
  sae::SaeStorage sae_storage;      // --sae-top-k, --sae-dense
  int64_t max_length = 0;       // tokens; 0: no limit
  int64_t batch_size = 0;       // examples per forward pass, at most kMaxBatchSize; 0: chosen from a token budget
  int64_t window = 1024;        // examples per commit: the unit of length sorting and of resumption
  bool gzip = false;
  bool resume = false;
  bool overwrite = false;
  int shard_index = 0, shard_count = 1;
  steering::SteeringSpec steering;  // written into the stream while capturing (how a steer moves later layers)
  // A model loaded already (the Python package's) to capture with instead of loading `model_dir`: its one copy on its
  // devices; the request's model, devices and dtype are then not read.
  const loading::SharedModel* loaded = nullptr;

  // Fault injection for tests: batches with more examples than this fail as if the GPU ran out of memory.
  int64_t simulate_out_of_memory_above = 0;
};

struct CaptureSummary {
  int64_t examples = 0;         // examples in the output files
  int64_t processed = 0;        // examples run by this invocation (fewer when resuming)
  int64_t tokens = 0;           // tokens run by this invocation
  int64_t computed_tokens = 0;  // positions the forward passes computed: the tokens and the batches' padding
  int64_t batches = 0;          // forward passes run (a batch split after running out of memory counts once)
  int64_t truncated = 0;        // texts cut to --max-length
  int64_t out_of_memory_retries = 0;
  std::vector<int64_t> layers;
  std::vector<std::string> files;
  std::vector<std::string> label_names;
  std::vector<data::SkippedLine> skipped;
  std::array<int64_t, 3> split_sizes{};
  double load_seconds = 0, capture_seconds = 0;
  double warm_up_seconds = 0;  // between the load and the capture, on GPUs (see capture.cpp: BatchRunner::warm_up)
  std::string device, dtype;
  bool already_complete = false;
};

/// Parses --shard I/N into the options; anything else is a usage error.
void parse_shard(const std::string& text, CaptureOptions& options);
/// --shard auto: this process's shard is its rank in the launch; its local rank picks the GPU (modulo the
/// `gpu_count` it sees, so that one GPU per task under Slurm's --gpus-per-task is cuda:0) when the device is
/// auto or cuda and no --devices were given. Logs the launcher found.
void apply_launch_rank(const LaunchRank& launch, size_t gpu_count, CaptureOptions& options);

}  // namespace probekit::capture
