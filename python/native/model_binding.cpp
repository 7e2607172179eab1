// The package's Model: one copy of a model's weights on its devices (loading::load_shared_model), captured from in
// memory (capture::capture_rows), generated from (inference::Engine over the same weights) and patched
// (patching::run_patch).
#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <optional>

#include "capture/memory_capture.h"
#include "chat/conversation.h"
#include "common/interrupt.h"
#include "common/json.h"
#include "common/outputs.h"
#include "device/torch/gpu_utils.h"
#include "generation/flags.h"
#include "inference/generation_view.h"
#include "inference/session.h"
#include "native.h"
#include "patching/patch_tool.h"

namespace probekit::python {

namespace {

ModelHandle load(const std::string& model, const std::string& device, const std::string& dtype,
                 const std::vector<std::string>& devices, int64_t max_gpu_memory) {
  loading::ModelRequest request;
  request.model_dir = model;
  request.device = device;
  request.dtype = dtype;
  request.devices = devices;
  request.max_gpu_memory = max_gpu_memory;
  py::gil_scoped_release release;
  return std::make_shared<loading::SharedModel>(loading::load_shared_model(request));
}

/// What model.capture asks for, in capture_activations' terms.
struct CaptureArguments {
  std::string layers, site, position;
  std::optional<std::string> prompt_suffix;
  int64_t batch_size = 0, max_length = 0;
  std::vector<std::pair<std::string, std::string>> saes;  // (name, folder)
};

capture::CaptureOptions capture_options(const CaptureArguments& arguments, const py::list& steer,
                                        const std::string& probes_dir) {
  capture::CaptureOptions options;
  options.layers = arguments.layers;
  options.sae_site = parse_sae_site(arguments.site);
  if (!options.sae_site) options.site = parse_site(arguments.site);
  for (const auto& [name, path] : arguments.saes) options.saes.push_back({name, path});
  options.sae_storage.dense = options.sae_site.has_value();  // rows in memory: every latent
  options.position = parse_position(arguments.position);
  if (arguments.prompt_suffix) options.prompt_suffix = *arguments.prompt_suffix;
  if (arguments.batch_size < 0) throw std::invalid_argument(fmt::format("batch_size {}: must be 1 or more", arguments.batch_size));
  if (arguments.max_length < 0) throw std::invalid_argument(fmt::format("max_length {}: must be 0 or more", arguments.max_length));
  options.batch_size = arguments.batch_size;
  options.max_length = arguments.max_length;
  options.steering = steering_spec(steer, probes_dir);
  return options;
}

// (layers, rows per layer as DLPack capsules, row offsets of each text for position "all", texts cut).
py::tuple capture(const ModelHandle& model, const std::vector<std::string>& texts, const CaptureArguments& arguments,
                  const py::list& steer, const std::string& probes_dir, const py::object& progress) {
  const capture::CaptureOptions options = capture_options(arguments, steer, probes_dir);
  ProgressScope scope(progress);
  capture::CapturedRows rows;
  {
    py::gil_scoped_release release;
    rows = capture::capture_rows(*model, texts, options);
  }
  py::list tensors;
  for (const at::Tensor& layer : rows.rows) tensors.append(to_dlpack(layer));
  return py::make_tuple(rows.layers, tensors, rows.offsets, rows.truncated);
}

/// What model.generate asks for: multi_probe_inference --generate's flags.
struct GenerateArguments {
  int64_t max_new_tokens = 64;
  bool stop = true;
  generation::Sampling sampling;
  int64_t top_k = 5;
  double threshold = 0.1;
  bool calibrated = false;
  std::string monitors;  // monitors=: the policies as a JSON list (the server's "monitors"); empty: none
  std::string conversation;  // messages=: the conversation's JSON (as rank's); empty: the prompts are texts
};

// Generates after `prompts`, handing `on_event` each line --generate --json prints (a token, then each row's end);
// `on_event` returning False stops that row.
void generate(const ModelHandle& model, const std::vector<std::string>& prompts, const ProbeSelection& probes,
              const GenerateArguments& arguments, const py::list& steer, const py::function& on_event) {
  clear_interrupt();  // a request left from before this call (it has no ProgressScope to forget it)
  check_shown(arguments.top_k, arguments.threshold);
  inference::EngineOptions engine_options = selected_engine_options(probes, steer);
  generation::GenerationFlags flags;
  flags.options.max_new_tokens = arguments.max_new_tokens;
  flags.options.sampling = arguments.sampling;
  flags.no_stop = !arguments.stop;
  inference::Display display;
  display.top_k = arguments.top_k;
  display.threshold = arguments.threshold;
  display.calibrated = arguments.calibrated;
  py::gil_scoped_release release;
  if (!model->model->has_lm_head()) throw std::invalid_argument("this model has no LM head: it cannot generate");
  inference::Engine engine = inference::Engine::attach(engine_options, *model);
  inference::check_calibrated(engine, arguments.calibrated, probes.dir, "calibrated", "threshold");
  const generation::GenerationOptions options = generation::resolve_generation_flags(flags, engine.model_dir());
  auto emit = [&on_event](const Json& event) {
    py::gil_scoped_acquire gil;
    return on_event(dump_json(event)).cast<bool>();
  };
  auto on_token = [&](const inference::ScoredToken& token) {
    return emit(inference::generated_token_json(token, inference::table_of(engine, token.probability, display),
                                                display.top_k));
  };
  std::vector<monitor::MonitorPolicy> policies;
  if (!arguments.monitors.empty()) policies = monitor::parse_policies(parse_json(arguments.monitors, "monitors"));
  // Read as rank reads messages=: every integer in it checked, none past 64 bits read as a double.
  const inference::ChatPrompts given =
      arguments.conversation.empty()
          ? inference::ChatPrompts{prompts, {}, false}
          : engine.chat_prompts({chat::conversation_of(parse_ordered_json(arguments.conversation, "messages"), "messages")});
  std::vector<inference::GeneratedText> texts =
      engine.generate_watched(given, options, engine.resolve_monitors(policies), on_token);
  const Json steering = engine.steering().empty() ? Json() : engine.steering().record();
  for (size_t row = 0; row < texts.size(); ++row) {
    emit(inference::generated_row_json(row, given.prompts[row], texts[row], steering));
  }
}

// A model's attribution graph, kept between model.patch calls: a sweep over pairs of one token count replays it
// (run_patching). One call at a time uses it.
struct PatchGraphs {
  explicit PatchGraphs(const loading::SharedModel& model) : graphs(*model.model) {}
  std::mutex lock;
  readout::StepGraphs graphs;
};

// model.patch: patch_activations on the loaded model; patching.json as text, also written to output_dir when given.
std::string patch(const ModelHandle& model, PatchGraphs& graphs, const patching::PatchArguments& arguments,
                  const std::string& output_dir, bool overwrite, const py::object& progress) {
  ProgressScope scope(progress);
  py::gil_scoped_release release;
  const std::lock_guard<std::mutex> one_call(graphs.lock);
  std::optional<StagedDirectory> out;
  if (!output_dir.empty()) out.emplace(output_dir, overwrite, std::vector<std::string>{model->source.resolved.dir});
  const Json patching = patching::run_patch(*model, arguments, &graphs.graphs);
  if (out) {
    patching::write_patching(out->path(), patching);
    out->commit();
  }
  return dump_json(patching);
}

py::dict describe(const ModelHandle& model) {
  const model::ModelConfig& config = model->model->config();
  const device::ComputeTarget& target = model->targets.front();
  py::dict out;
  out["name"] = model->source.resolved.name;
  out["dir"] = model->source.resolved.dir;
  out["revision"] = model->source.resolved.revision;
  out["model_type"] = config.text_model_type;
  out["num_layers"] = config.num_layers;
  out["hidden_size"] = config.hidden_size;
  out["vocab_size"] = config.vocab_size;
  out["device"] = target.device.str();
  out["dtype"] = device::dtype_name(target.dtype_choice.dtype);
  return out;
}

}  // namespace

void bind_model(py::module_& module) {
  py::class_<loading::SharedModel, std::shared_ptr<loading::SharedModel>>(module, "Model");
  py::class_<PatchGraphs, std::shared_ptr<PatchGraphs>>(module, "PatchGraphs");
  module.def("patch_graphs", [](const ModelHandle& model) { return std::make_shared<PatchGraphs>(*model); },
             py::arg("model"));
  module.def("load_model", &load, py::arg("model"), py::arg("device"), py::arg("dtype"), py::arg("devices"),
             py::arg("max_gpu_memory"));
  module.def("describe", &describe, py::arg("model"));
  module.def(
      "capture",
      [](const ModelHandle& model, const std::vector<std::string>& texts, const std::string& layers,
         const std::string& site, const std::string& position, const std::optional<std::string>& prompt_suffix,
         int64_t batch_size, int64_t max_length, const py::list& steer, const std::string& probes_dir,
         const py::object& progress, const std::vector<std::pair<std::string, std::string>>& saes) {
        return capture(model, texts, {layers, site, position, prompt_suffix, batch_size, max_length, saes}, steer,
                       probes_dir, progress);
      },
      py::arg("model"), py::arg("texts"), py::arg("layers"), py::arg("site"), py::arg("position"),
      py::arg("prompt_suffix"), py::arg("batch_size"), py::arg("max_length"), py::arg("steer"), py::arg("probes_dir"),
      py::arg("progress"), py::arg("saes"));
  module.def(
      "generate",
      [](const ModelHandle& model, const std::vector<std::string>& prompts, const std::string& probes_dir,
         const std::string& layers, int64_t layer, bool best_layer, int64_t max_new_tokens, bool stop, double temperature, int64_t sample_top_k, double top_p, uint64_t seed,
         int64_t top_k, double threshold, bool calibrated, const py::list& steer, const std::string& monitors,
         const std::string& conversation, const py::function& on_event) {
        GenerateArguments arguments{max_new_tokens, stop, {temperature, sample_top_k, top_p, seed}, top_k, threshold,
                                    calibrated, monitors, conversation};
        generate(model, prompts, {probes_dir, layers, layer, best_layer}, arguments, steer, on_event);
      },
      py::arg("model"), py::arg("prompts"), py::arg("probes_dir"), py::arg("layers"), py::arg("layer"),
      py::arg("best_layer"), py::arg("max_new_tokens"), py::arg("stop"),
      py::arg("temperature"), py::arg("sample_top_k"), py::arg("top_p"), py::arg("seed"), py::arg("top_k"),
      py::arg("threshold"), py::arg("calibrated"), py::arg("steer"), py::arg("monitors"), py::arg("conversation"),
      py::arg("on_event"));
  module.def(
      "patch",
      [](const ModelHandle& model, PatchGraphs& graphs, const std::string& clean, const std::string& corrupted,
         const std::string& subject,
         double noise, uint64_t seed, const std::string& metric, const std::vector<std::string>& sites,
         const std::string& layers, const std::string& positions, int64_t layer_window, const std::string& direction,
         const std::string& method, const std::string& output_dir, bool overwrite, const py::object& progress) {
        patching::PatchArguments arguments;
        arguments.clean = clean;
        arguments.corrupted = corrupted;
        if (!subject.empty()) arguments.corruption = "noise";
        arguments.noise = {subject, noise, seed};
        arguments.metric = metric;
        arguments.sites = sites;
        arguments.layers = layers;
        arguments.positions = positions;
        arguments.layer_window = layer_window;
        arguments.direction = direction;
        arguments.method = method;
        return patch(model, graphs, arguments, output_dir, overwrite, progress);
      },
      py::arg("model"), py::arg("graphs"), py::arg("clean"), py::arg("corrupted"), py::arg("subject"), py::arg("noise"),
      py::arg("seed"), py::arg("metric"), py::arg("sites"), py::arg("layers"), py::arg("positions"),
      py::arg("layer_window"), py::arg("direction"), py::arg("method"), py::arg("output_dir"), py::arg("overwrite"),
      py::arg("progress"));
}

}  // namespace probekit::python
