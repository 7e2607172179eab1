#include "patching/patch_tool.h"

#include <optional>

#include "cli/cli.h"
#include "common/error.h"
#include "common/outputs.h"
#include "common/utf8_text.h"
#include "device/torch/gpu_utils.h"
#include "sites/layers.h"
#include "sites/sites.h"

namespace probekit::patching {

namespace {

// A --site name with patching's own sites in the refusal: capture's parse_site lists sites patching refuses.
Site parse_patch_site(const std::string& written) {
  // Regression: "--site 'resid_post, mlp_out'" refused " mlp_out".
  const std::string name(trimmed(written));
  if (std::optional<Site> site = find_site(name)) return *site;  // a site patching cannot take: check_request_flags
  std::vector<std::string> names;
  for (Site site : patch_sites()) names.emplace_back(site_name(site));
  const std::string best = nearest_name(name, names);
  fail_usage("--site {}: patching takes {}{}", name, patch_site_names(), best.empty() ? "" : " (did you mean " + best + "?)");
}

// What the flags ask for that needs no model (checked before the model loads): all but the layers and positions.
PatchRequest flag_request(const PatchArguments& a) {
  if (a.corruption == "prompt") {
    if (a.corrupted.empty()) fail_usage("--corrupted: give the corrupted prompt (or --corruption noise --subject TEXT)");
    if (!a.noise.subject.empty()) fail_usage("--subject goes with --corruption noise");
    const NoiseCorruption defaults;
    if (a.noise_given || a.noise.scale != defaults.scale || a.noise.seed != defaults.seed) {
      fail_usage("--noise and --seed go with --corruption noise (a corrupted prompt draws no noise)");
    }
  } else if (a.corruption == "noise") {
    if (!a.corrupted.empty()) fail_usage("--corrupted and --corruption noise exclude each other");
    if (a.noise.subject.empty()) fail_usage("--corruption noise needs --subject: the text whose tokens get the noise");
    check_noise(a.noise);
  } else {
    fail_usage("--corruption {}: expected prompt or noise", a.corruption);
  }
  PatchRequest request;
  request.sites.clear();
  for (const std::string& name : a.sites) request.sites.push_back(parse_patch_site(name));
  request.layer_window = a.layer_window;
  if (a.direction != "denoise" && a.direction != "noise") fail_usage("--direction {}: expected denoise or noise", a.direction);
  request.direction = a.direction == "denoise" ? Direction::kDenoise : Direction::kNoise;
  if (a.method != "exact" && a.method != "attribution" && a.method != "both") {
    fail_usage("--method {}: expected exact, attribution or both", a.method);
  }
  request.exact = a.method != "attribution";
  request.attribution = a.method != "exact";
  request.metric = parse_metric(a.metric);
  if (a.rows_per_batch < 0) fail_usage("--rows-per-batch {}: must be 0 (chosen) or more", a.rows_per_batch);
  request.rows_per_batch = a.rows_per_batch;
  check_request_flags(request);
  return request;
}

}  // namespace

void add_patch_flags(CLI::App& app, PatchActivationsOptions& o) {
  PatchArguments& a = o.patch;
  add_model_options(app, o.model.model_dir, "The checkpoint to patch")->required();
  app.add_option("--clean", a.clean, "The clean prompt (tokenized with special tokens, no template)")->required();
  app.add_option("--corrupted", a.corrupted, "The corrupted prompt: as many tokens as the clean one");
  app.add_option("--corruption", a.corruption, "prompt (--corrupted) or noise (ROME: noise on --subject's embeddings)")
      ->capture_default_str();
  app.add_option("--subject", a.noise.subject, "With --corruption noise: the clean prompt's text whose tokens are noised");
  // Regression: --seed 0, the default, given with a corrupted prompt was not refused.
  const auto given = [&a](const std::string&) { a.noise_given = true; };
  app.add_option("--noise", a.noise.scale, "With --corruption noise: the noise's size in embedding standard deviations")
      ->each(given)
      ->capture_default_str();
  app.add_option("--seed", a.noise.seed, "With --corruption noise: the noise's seed")
      ->check(at_least(0))
      ->each(given)
      ->capture_default_str();
  app.add_option("--metric", a.metric, "logit-diff[:ANSWER,FOIL], prob[:TOKEN] or kl (tokens as ids or strings)")
      ->capture_default_str();
  app.add_option("--site", a.sites, "resid_post, attn_out or mlp_out; several give a grid each")
      ->delimiter(',')
      ->capture_default_str();
  add_layers_option(app, a.layers, "The grid's layers (default: all)");
  app.add_option("--positions", a.positions, "The grid's token positions: 0,3,5-9 or all")->capture_default_str();
  app.add_option("--layer-window", a.layer_window, "Patch this many consecutive layers centred on each layer")
      ->capture_default_str();
  app.add_option("--direction", a.direction, "denoise (clean values into the corrupted run) or noise (the reverse)")
      ->capture_default_str();
  app.add_option("--method", a.method, "exact (a run per cell, batched), attribution (one backward pass) or both")
      ->capture_default_str();
  app.add_option("--rows-per-batch", a.rows_per_batch, "Cells per forward pass (0: chosen from the prompt's length)")
      ->capture_default_str();
  app.add_option("--output-dir", o.output_dir, "Where patching.json and patching.html go")->required();
  add_overwrite_flag(app, o.overwrite);
  add_device_options(app, o.model.device, o.model.dtype);
  add_fp8_products_option(app, o.model.fp8_products);
}

Json run_patch(const loading::SharedModel& model, const PatchArguments& arguments, readout::StepGraphs* graphs) {
  PatchRequest request = flag_request(arguments);
  const PromptPair pair = arguments.corruption == "noise"
                              ? noised_pair(*model.model, *model.tokenizer, arguments.clean, arguments.noise)
                              : prompt_pair(*model.model, *model.tokenizer, arguments.clean, arguments.corrupted);
  request.layers = parse_index_list("--layers", arguments.layers, model.model->loaded_layers(), "layer", "model");
  request.positions =
      parse_index_list("--positions", arguments.positions, static_cast<int64_t>(pair.clean.size()), "position", "prompt");
  const PatchingResult result = run_patching(*model.model, *model.tokenizer, pair, request, graphs);
  PatchingInputs inputs{model.source.resolved.name, model.targets.front().device.str(),
                        device::dtype_name(model.targets.front().dtype_choice.dtype), arguments.clean,
                        arguments.corrupted, {}};
  if (arguments.corruption == "noise") inputs.noise = arguments.noise;
  return patching_json(result, pair, request, inputs, *model.tokenizer);
}

Json run_patch_activations(const PatchActivationsOptions& options) {
  flag_request(options.patch);  // bad flags and outputs are refused before the model loads
  StagedDirectory out(options.output_dir, options.overwrite, {options.model.model_dir});
  const loading::SharedModel model = loading::load_shared_model(options.model);
  const Json patching = run_patch(model, options.patch);
  write_patching(out.path(), patching);
  out.commit();
  return patching;
}

}  // namespace probekit::patching
