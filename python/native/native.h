// The pieces of the extension module probekit._native, each binding one part of the library; the Python package
// (python/probekit/) wraps them. Native calls release the GIL while the library works and take it back only to call
// into Python (progress, generated tokens).
#pragma once

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "common/progress.h"
#include "inference/engine.h"
#include "loading/model_loading.h"
#include "steering/steering.h"

namespace probekit::python {

namespace py = pybind11;

/// A model loaded once, shared by every call that runs it (capture, ranking, per-token, generation).
using ModelHandle = std::shared_ptr<loading::SharedModel>;

/// Which probes of a directory run, as multi_probe_inference's --layers, --layer and --best-layer pick them (an
/// empty directory: none).
struct ProbeSelection {
  std::string dir, layers;
  int64_t layer = -1;
  bool best_layer = false;
};

/// A tensor handed to Python without a copy: a DLPack capsule that torch.utils.dlpack.from_dlpack takes over.
py::capsule to_dlpack(const at::Tensor& tensor);
/// A tensor from Python (torch.utils.dlpack.to_dlpack's capsule), taken over without a copy.
at::Tensor from_dlpack(const py::capsule& capsule);

/// The steering of a call: items (label, layer, coefficient) take the label's probe direction from `probes_dir`;
/// items (vector, layer, coefficient) add a vector given as a list of floats.
steering::SteeringSpec steering_spec(const py::list& items, const std::string& probes_dir);

/// The engine options of the probes `selection` picks, steered as `steer` says (steering_spec).
inference::EngineOptions selected_engine_options(const ProbeSelection& selection, const py::list& steer);

/// While alive, every progress bar's updates go to `callback(label, unit, done, total, finished)` (None: nowhere),
/// called with the GIL from the thread that does the work; and an earlier interruption request is forgotten.
class ProgressScope {
 public:
  explicit ProgressScope(const py::object& callback);
  ~ProgressScope();
  ProgressScope(const ProgressScope&) = delete;
  ProgressScope& operator=(const ProgressScope&) = delete;
};

/// Refuses a top_k under 1 and a threshold outside [0, 1] (NaN too), as multi_probe_inference's --top-k and
/// --threshold do.
void check_shown(int64_t top_k, double threshold);

/// Parses a tool's flags given as strings (the Python keyword arguments, already spelled as flags) onto `app`,
/// throwing UsageError with CLI11's message for a flag the tool does not take or a bad value.
void parse_flags(CLI::App& app, const std::vector<std::string>& flags);

void bind_model(py::module_& module);
void bind_probes(py::module_& module);
void bind_tools(py::module_& module);
void bind_sae(py::module_& module);

}  // namespace probekit::python
