#include "capture/capture_flags.h"

#include "steering/steering_flags.h"

#include <fmt/format.h>

#include "cli/cli.h"
#include "common/error.h"
#include "common/units.h"
#include "device/torch/gpu_utils.h"

namespace probekit::capture {

namespace {

void add_data_flags(CLI::App& app, CaptureFlags& f) {
  CaptureOptions& o = f.options;
  app.add_option("--dataset", o.dataset_path,
                 "JSONL file, one labelled example per line; - reads standard input (a pipe is read whole, once)")
      ->required();
  app.add_option("--max-examples", o.dataset.max_examples, "Use only the first N examples (0: all)")
      ->check(at_least(0));
  app.add_option("--text-field", o.dataset.text_field, "JSON field holding the text")->capture_default_str();
  app.add_option("--label-field", o.dataset.label_field, "JSON field holding the label (default: cognitive_action, or sentiment)");
  app.add_option("--keep-fields", f.keep_fields, "Extra JSON fields stored as metadata columns, e.g. domain,emotional_state")
      ->delimiter(',');
  app.add_option_function<std::string>(
         "--prompt-suffix", [&o](const std::string& suffix) { o.prompt_suffix = suffix; },
         "Text appended to every example; empty to disable (default: the reference's, \"\\n\\nThe cognitive action "
         "being demonstrated here is\"; conversations take none)");
  app.add_option("--mask", f.mask,
                 "Conversations (rows with \"messages\"): the tokens read, those of the assistant's messages, the "
                 "user's, the last assistant message's, or all (default: assistant)");
  app.add_flag("--add-generation-prompt", o.add_generation_prompt,
               "Conversations: render them with the chat template's generation prompt (the assistant's turn opened)");
  app.add_option("--split", f.split, "Train,val,test ratios")->capture_default_str();
  // Python's random.seed(-1) seeds with abs(-1); read as a uint64, -1 became 2^64 - 1: negative seeds are refused.
  app.add_option("--seed", o.seed, "Seed of the stratified split (Python's random)")
      ->capture_default_str()
      ->check(at_least(0));
  app.add_option("--max-length", o.max_length, "Cut longer prompts from the start of the text (tokens; 0: no limit)")
      ->check(at_least(0));
  steering::add_steering_flags(app, o.steering, true, true);
  app.add_flag("--strict", o.dataset.strict_fields,
               "A --keep-fields field that no line has, or a cognitive_action label outside the reference's 45 beside "
               "others inside it, is an error, not a warning");
  app.add_flag("--skip-invalid", o.dataset.skip_invalid, "Skip bad dataset lines (reported at the end) instead of stopping");
}

void add_run_flags(CLI::App& app, CaptureFlags& f) {
  CaptureOptions& o = f.options;
  app.add_option("--batch-size", o.batch_size,
                 fmt::format("Examples per forward pass, at most {} (default: chosen from device memory)", kMaxBatchSize))
      ->check(at_least(0));
  app.add_option("--max-gpu-memory", f.max_gpu_memory,
                 "GPU memory the capture may use, weights included, e.g. 40GB (default: what is free; on MPS "
                 "Metal's recommended working set less what the process holds)");
  add_device_options(app, o.device, o.dtype, "(auto: bf16 on capable GPUs, fp32 on CPU)");
  add_fp8_products_option(app, o.fp8_products);
  add_placement_options(app, f.devices, o.placement,
                        "Several GPUs, e.g. 0,1: model replicas sharing the batches, or a model's layers split over "
                        "them (--placement)");
  app.add_option("--shard", f.shard, "I/N: run only shard I of N of the examples (separate processes or machines), "
                                    "into OUTPUT_DIR/shard_I_of_N; join them with merge_activations. auto: I and N "
                                    "from the launcher (Slurm, torchrun, Open MPI), its local rank picking the GPU");
  app.add_option("--window", o.window, "Examples per commit to disk (the unit of resumption)")
      ->capture_default_str()
      ->check(at_least(1));
}

void add_output_flags(CLI::App& app, CaptureFlags& f) {
  CaptureOptions& o = f.options;
  app.add_option("--output-dir", o.output_dir, "Where layer_{L}_activations.h5 files go")->capture_default_str();
  add_layers_option(app, o.layers, "Layers to capture: 8 17 25, 8,17,25, 21-30 or all (default: n/4, n/2, 3n/4, n-1)");
  app.add_option("--position", f.position, "Rows per example: last token, mean or max over tokens, or all tokens")
      ->capture_default_str();
  app.add_option("--site", f.site,
                 "Where in each layer to read: " + site_names() +
                     ", or sae:NAME (an SAE's latents) or sae-error:NAME (what it misses) at the SAE's layer "
                     "(docs/sites.md says what each holds)")
      ->capture_default_str();
  sae::add_sae_flags(app, o.saes, &o.sae_storage);
  app.add_option("--compression", f.compression, "gzip|none")->capture_default_str();
  app.add_flag("--resume", o.resume, "Continue an interrupted capture");
  app.add_flag("--overwrite", o.overwrite, "Replace existing activation files");
  app.add_flag("--json", f.json, "Print a machine-readable summary on stdout at the end");
  app.add_option("--format", f.format, "Accepted for compatibility with the reference; only hdf5 is written")
      ->check(CLI::IsMember({"hdf5"}));
  app.add_flag("--batch-save,--single-pass", f.legacy_flag, "Accepted for compatibility; always on");
}

}  // namespace

void add_capture_flags(CLI::App& app, CaptureFlags& flags) {
  add_model_options(app, flags.options.model_dir, "Checkpoint (config.json, *.safetensors, tokenizer.json)")->required();
  add_data_flags(app, flags);
  add_run_flags(app, flags);
  add_output_flags(app, flags);
}

CaptureOptions CaptureFlags::resolve() const {
  CaptureOptions o = options;
  o.dataset.keep_fields = keep_fields;
  o.position = parse_position(position);
  if (!mask.empty()) o.mask = parse_token_mask(mask);
  o.sae_site = parse_sae_site(site);
  if (!o.sae_site) o.site = parse_site(site);
  o.split = data::parse_split_ratios(split);
  if (compression != "gzip" && compression != "none") fail_usage("--compression {}: expected gzip or none", compression);
  o.gzip = compression == "gzip";
  if (!max_gpu_memory.empty()) o.max_gpu_memory = parse_byte_size(max_gpu_memory, "--max-gpu-memory");
  if (o.resume && o.overwrite) fail_usage("--resume and --overwrite exclude each other");
  for (int index : devices) o.devices.push_back(fmt::format("cuda:{}", index));
  if (shard == "auto") {
    apply_launch_rank(launch_rank(launcher_environment()), device::query_runtime().gpus.size(), o);
  } else if (!shard.empty()) {
    parse_shard(shard, o);
  }
  return o;
}

}  // namespace probekit::capture
