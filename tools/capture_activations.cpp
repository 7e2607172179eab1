// capture_activations: runs a Hugging Face checkpoint over labelled texts and stores chosen layers'
// activations in HDF5, one file per layer, resumable.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "capture/capture.h"
#include "common/cli.h"
#include "common/error.h"
#include "common/json.h"
#include "common/units.h"
#include "device/gpu_utils.h"

using namespace probekit;

int main(int argc, char** argv) {
  use_passive_openmp_threads(argv);
  CLI::App app{"Capture a model's activations for labelled texts (JSONL) into one HDF5 file per layer"};
  CommonOptions common;
  add_common_options(app, common);
  capture::CaptureOptions o;
  std::vector<std::string> layers, keep_fields;
  std::string position = "last", site = "resid_post", split = "0.7,0.15,0.15", compression = "none", max_gpu_memory;
  std::string format = "hdf5", shard;
  std::vector<int> devices;
  bool json = false, legacy_flag = false;

  app.add_option("--model", o.model_dir, "Checkpoint directory (config.json, *.safetensors, tokenizer.json)")->required();
  app.add_option("--dataset", o.dataset_path, "JSONL file, one labelled example per line")->required();
  app.add_option("--output-dir", o.output_dir, "Where layer_{L}_activations.h5 files go")->capture_default_str();
  app.add_option("--layers", layers, "Layers to capture: 8,17,25 or 21-30 or all (default: n/4, n/2, 3n/4, n-1)")
      ->delimiter(',');
  app.add_option("--max-examples", o.dataset.max_examples, "Use only the first N examples (0: all)");
  app.add_option("--batch-size", o.batch_size, "Examples per forward pass (default: chosen from device memory)");
  app.add_option("--max-gpu-memory", max_gpu_memory, "GPU memory the capture may use, e.g. 40GB (default: what is free)");
  app.add_option("--device", o.device, "auto|cpu|cuda|cuda:N|rocm|mps")->capture_default_str();
  app.add_option("--devices", devices, "Several GPUs, e.g. 0,1: one model replica on each, sharing the batches")
      ->delimiter(',');
  app.add_option("--shard", shard, "I/N: run only shard I of N of the examples (separate processes or machines), "
                                  "into OUTPUT_DIR/shard_I_of_N; join them with merge_activations");
  app.add_option("--dtype", o.dtype, "auto|fp32|bf16|fp16 (auto: bf16 on capable GPUs, fp32 on CPU)")->capture_default_str();
  app.add_option("--text-field", o.dataset.text_field, "JSON field holding the text")->capture_default_str();
  app.add_option("--label-field", o.dataset.label_field, "JSON field holding the label (default: cognitive_action, or sentiment)");
  app.add_option("--keep-fields", keep_fields, "Extra JSON fields stored as metadata columns, e.g. domain,emotional_state")
      ->delimiter(',');
  app.add_option("--prompt-suffix", o.prompt_suffix, "Text appended to every example; empty to disable")
      ->capture_default_str();
  app.add_option("--split", split, "Train,val,test ratios")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the stratified split (Python's random)")->capture_default_str();
  app.add_option("--position", position, "Rows per example: last token, mean or max over tokens, or all tokens")
      ->capture_default_str();
  app.add_option("--site", site, "resid_post (layer output), resid_pre, resid_mid, attn_out or mlp_out")
      ->capture_default_str();
  app.add_option("--max-length", o.max_length, "Cut longer prompts from the start of the text (tokens; 0: no limit)");
  app.add_option("--compression", compression, "gzip|none")->capture_default_str();
  app.add_option("--window", o.window, "Examples per commit to disk (the unit of resumption)")->capture_default_str();
  app.add_flag("--resume", o.resume, "Continue an interrupted capture");
  app.add_flag("--overwrite", o.overwrite, "Replace existing activation files");
  app.add_flag("--skip-invalid", o.dataset.skip_invalid, "Skip bad dataset lines (reported at the end) instead of stopping");
  app.add_flag("--json", json, "Print a machine-readable summary on stdout at the end");
  app.add_option("--format", format, "Accepted for compatibility with the reference; only hdf5 is written")
      ->check(CLI::IsMember({"hdf5"}));
  app.add_flag("--batch-save,--single-pass", legacy_flag, "Accepted for compatibility; always on");

  return run_tool(app, argc, argv, common, [&] {
    device::configure_threads(common.threads);
    o.layers = fmt::format("{}", fmt::join(layers, ","));
    o.dataset.keep_fields = keep_fields;
    o.position = capture::parse_position(position);
    o.site = capture::parse_site(site);
    o.split = data::parse_split_ratios(split);
    if (compression != "gzip" && compression != "none") fail_usage("--compression {}: expected gzip or none", compression);
    o.gzip = compression == "gzip";
    if (!max_gpu_memory.empty()) o.max_gpu_memory = parse_byte_size(max_gpu_memory, "--max-gpu-memory");
    if (o.resume && o.overwrite) fail_usage("--resume and --overwrite exclude each other");
    for (int index : devices) o.devices.push_back(fmt::format("cuda:{}", index));
    if (!shard.empty()) {
      int index = -1, count = 0;
      char tail = 0;
      if (std::sscanf(shard.c_str(), "%d/%d%c", &index, &count, &tail) != 2) fail_usage("--shard {}: expected I/N, e.g. 0/4", shard);
      o.shard_index = index;
      o.shard_count = count;
    }

    capture::CaptureSummary s = capture::run_capture(o);
    double rate = s.capture_seconds > 0 ? static_cast<double>(s.processed) / s.capture_seconds : 0.0;
    if (json) {
      Json skipped = Json::array();
      for (const auto& line : s.skipped) skipped.push_back({{"line", line.line + 1}, {"reason", line.reason}});
      Json out = {{"examples", s.examples},
                  {"processed", s.processed},
                  {"splits", {{"train", s.split_sizes[0]}, {"val", s.split_sizes[1]}, {"test", s.split_sizes[2]}}},
                  {"layers", s.layers},
                  {"files", s.files},
                  {"label_names", s.label_names},
                  {"tokens", s.tokens},
                  {"truncated", s.truncated},
                  {"skipped_lines", skipped},
                  {"out_of_memory_retries", s.out_of_memory_retries},
                  {"load_seconds", s.load_seconds},
                  {"capture_seconds", s.capture_seconds},
                  {"examples_per_second", rate},
                  {"device", s.device},
                  {"dtype", s.dtype},
                  {"already_complete", s.already_complete}};
      fmt::print("{}\n", dump_json(out, 2));
      return;
    }
    if (s.already_complete) {
      fmt::print("Nothing to do: the activation files are already complete.\n");
    } else {
      fmt::print("Captured {} examples (train {}, val {}, test {}) at layers {} in {:.1f} s ({:.1f} examples/s, {:.0f} tokens/s)\n",
                 s.examples, s.split_sizes[0], s.split_sizes[1], s.split_sizes[2], fmt::join(s.layers, ", "),
                 s.capture_seconds, rate, s.capture_seconds > 0 ? static_cast<double>(s.tokens) / s.capture_seconds : 0.0);
    }
    for (const std::string& file : s.files) fmt::print("  {}\n", file);
    if (s.truncated > 0) fmt::print("{} texts were cut to --max-length {}\n", s.truncated, o.max_length);
    if (!s.skipped.empty()) {
      fmt::print("{} invalid lines were skipped:\n", s.skipped.size());
      for (const auto& line : s.skipped) fmt::print("  {}\n", line.reason);
    }
  });
}
