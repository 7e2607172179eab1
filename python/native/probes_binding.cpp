// The package's Probes: a probes directory (any kind, binary or multiclass) run on a Model through an
// inference::Engine that shares the model's weights; each call returns what multi_probe_inference --json prints.
#include "common/interrupt.h"
#include "common/json.h"
#include "inference/ranking.h"
#include "inference/session.h"
#include "native.h"
#include "probes/probe_catalog.h"

namespace probekit::python {

namespace {

/// How results are shown: multi_probe_inference's --top-k, --threshold, --calibrated, --mode and --aggregate.
struct DisplayArguments {
  int64_t top_k = 5;
  double threshold = 0.1;
  bool calibrated = false;
  std::string mode = "all", aggregate = "max";
};

inference::Display display_of(const DisplayArguments& arguments) {
  check_shown(arguments.top_k, arguments.threshold);
  if (arguments.mode != "all" && arguments.mode != "by-action" && arguments.mode != "by-layer") {
    throw std::invalid_argument("mode '" + arguments.mode + "': expected all, by-action or by-layer");
  }
  return inference::json_display(arguments.top_k, arguments.threshold, arguments.calibrated, arguments.mode,
                                 arguments.aggregate);
}

// An engine over `model` with the selected probes, steering as `steer` says (without the GIL: it loads the probes).
inference::Engine engine_for(const ModelHandle& model, const ProbeSelection& selection, const py::list& steer) {
  inference::EngineOptions options = selected_engine_options(selection, steer);
  py::gil_scoped_release release;
  return inference::Engine::attach(options, *model);
}

// What --json prints for each text (or conversation, as chat::conversation_text writes it: its messages, or
// {"messages", "tools"}; then texts are empty), as one JSON array.
std::string rank(const ModelHandle& model, const ProbeSelection& selection, const std::vector<std::string>& texts,
                 const std::vector<std::string>& conversations, const DisplayArguments& arguments, const py::list& steer) {
  clear_interrupt();  // a request left from before this call (it has no ProgressScope to forget it)
  const inference::Display display = display_of(arguments);
  inference::Engine engine = engine_for(model, selection, steer);
  inference::check_calibrated(engine, display.calibrated, selection.dir, "calibrated", "threshold");
  py::gil_scoped_release release;
  const bool conversation = !conversations.empty();
  std::vector<inference::TextScores> scores = conversation ? engine.score_conversations(conversations) : engine.score(texts);
  Json all = Json::array();
  for (size_t i = 0; i < scores.size(); ++i) {
    all.push_back(inference::text_json(engine, conversation ? "conversation" : texts[i], scores[i], display,
                                       selection.best_layer));
  }
  return dump_json(all);
}

// What --per-token --json prints for one text, or for one conversation (`conversation`: as chat::conversation_text
// writes it; then the text is empty).
std::string per_token(const ModelHandle& model, const ProbeSelection& selection, const std::string& text,
                      const std::string& conversation, const DisplayArguments& arguments, const py::list& steer) {
  clear_interrupt();  // as rank
  const inference::Display display = display_of(arguments);
  inference::Engine engine = engine_for(model, selection, steer);
  inference::check_calibrated(engine, display.calibrated, selection.dir, "calibrated", "threshold");
  py::gil_scoped_release release;
  inference::TokenScores scores =
      conversation.empty() ? engine.score_tokens(text) : engine.score_conversation_tokens(conversation);
  std::vector<inference::ScoreTable> tables;
  for (const auto& probability : scores.probability) tables.push_back(inference::table_of(engine, probability, display));
  const std::string shown = conversation.empty() ? text : "conversation";
  Json out = inference::with_steering(inference::per_token_json(shown, scores, tables), engine);
  if (display.calibrated) out["thresholds"] = engine.threshold_source();  // as --per-token --calibrated --json
  return dump_json(out);
}

// The directory's layers and each label's best layer, checking that it holds probes.
py::dict describe_probe_dir(const std::string& dir) {
  probes::ProbeCatalog catalog = probes::find_probes(dir);
  std::vector<int64_t> layers;
  for (const auto& entry : catalog.layer_dirs) layers.push_back(entry.first);
  py::dict out;
  out["dir"] = catalog.dir;
  out["layers"] = layers;
  out["best_layer"] = catalog.best_layer;
  return out;
}

}  // namespace

void check_shown(int64_t top_k, double threshold) {
  if (top_k < 1) throw std::invalid_argument("top_k " + std::to_string(top_k) + ": must be 1 or more");
  if (!(threshold >= 0 && threshold <= 1)) {
    throw std::invalid_argument("threshold " + std::to_string(threshold) + ": must be a number from 0 to 1");
  }
}

void bind_probes(py::module_& module) {
  module.def("describe_probes", &describe_probe_dir, py::arg("dir"));
  module.def(
      "rank",
      [](const ModelHandle& model, const std::string& dir, const std::string& layers, int64_t layer, bool best_layer,
         const std::vector<std::string>& texts, const std::vector<std::string>& conversations, int64_t top_k,
         double threshold, bool calibrated, const std::string& mode, const std::string& aggregate, const py::list& steer) {
        return rank(model, {dir, layers, layer, best_layer}, texts, conversations,
                    {top_k, threshold, calibrated, mode, aggregate}, steer);
      },
      py::arg("model"), py::arg("dir"), py::arg("layers"), py::arg("layer"), py::arg("best_layer"), py::arg("texts"),
      py::arg("conversations"), py::arg("top_k"), py::arg("threshold"), py::arg("calibrated"), py::arg("mode"),
      py::arg("aggregate"), py::arg("steer"));
  module.def(
      "per_token",
      [](const ModelHandle& model, const std::string& dir, const std::string& layers, int64_t layer, bool best_layer,
         const std::string& text, const std::string& conversation, int64_t top_k, double threshold, bool calibrated,
         const py::list& steer) {
        return per_token(model, {dir, layers, layer, best_layer}, text, conversation, {top_k, threshold, calibrated},
                         steer);
      },
      py::arg("model"), py::arg("dir"), py::arg("layers"), py::arg("layer"), py::arg("best_layer"), py::arg("text"),
      py::arg("conversation"), py::arg("top_k"), py::arg("threshold"), py::arg("calibrated"), py::arg("steer"));
}

}  // namespace probekit::python
