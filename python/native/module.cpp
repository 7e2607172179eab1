// probekit._native: the library's calls for the Python package, and its exceptions turned into Python's with the
// message intact: the caller's mistakes (std::invalid_argument, usage errors, bad flags) as ValueError, files and
// the environment as RuntimeError, an interruption as KeyboardInterrupt.
#include <ATen/DLConvertor.h>

#include "cli/cli.h"
#include "common/error.h"
#include "common/interrupt.h"
#include "native.h"

namespace probekit::python {

namespace {

constexpr const char* kDlpackName = "dltensor";
constexpr const char* kUsedDlpackName = "used_dltensor";

void translate_exception(std::exception_ptr error) {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const Interrupted&) {
    PyErr_SetNone(PyExc_KeyboardInterrupt);
  } catch (const CLI::ParseError& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::invalid_argument& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const py::error_already_set&) {
    throw;  // a Python callback's own exception goes on as it is
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, explain_failure(e).c_str());
  }
}

}  // namespace

py::capsule to_dlpack(const at::Tensor& tensor) {
  // A capsule that torch never took (renamed "used_dltensor" when it does) still owns the tensor.
  return py::capsule(at::toDLPack(tensor), kDlpackName, [](PyObject* capsule) {
    if (std::strcmp(PyCapsule_GetName(capsule), kUsedDlpackName) == 0) return;
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kDlpackName));
    if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  });
}

at::Tensor from_dlpack(const py::capsule& capsule) {
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kDlpackName));
  if (managed == nullptr) {
    PyErr_Clear();
    throw std::invalid_argument("expected a tensor (a DLPack capsule not used already)");
  }
  // The tensor owns the memory from here: the capsule is marked used so that it frees nothing.
  PyCapsule_SetName(capsule.ptr(), kUsedDlpackName);
  return at::fromDLPack(managed);
}

ProgressScope::ProgressScope(const py::object& callback) {
  clear_interrupt();
  // The listener owns a reference to the callback, released with the GIL whichever thread drops it last.
  auto owned = std::shared_ptr<py::object>(new py::object(callback), [](py::object* object) {
    py::gil_scoped_acquire gil;
    delete object;
  });
  set_progress_listener([owned](const ProgressReport& report) {
    py::gil_scoped_acquire gil;
    if (!owned->is_none()) (*owned)(report.label, report.unit, report.done, report.total, report.finished);
  });
}

ProgressScope::~ProgressScope() {
  py::gil_scoped_release release;  // the listener's last reference may go here, taking the GIL itself
  set_progress_listener(nullptr);
}

void parse_flags(CLI::App& app, const std::vector<std::string>& flags) {
  std::vector<std::string> reversed(flags.rbegin(), flags.rend());  // CLI11 takes the arguments last first
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  refuse_empty_values(app);
}

inference::EngineOptions selected_engine_options(const ProbeSelection& selection, const py::list& steer) {
  inference::EngineOptions options;
  options.probes_dir = selection.dir;
  options.layers = selection.layers;
  options.layer = selection.layer;
  options.best_layer = selection.best_layer;
  options.steering = steering_spec(steer, selection.dir);
  return options;
}

steering::SteeringSpec steering_spec(const py::list& items, const std::string& probes_dir) {
  steering::SteeringSpec spec;
  spec.probes_dir = probes_dir;
  size_t index = 0;
  for (const py::handle& item : items) {
    auto fields = item.cast<py::tuple>();
    if (fields.size() != 3) throw std::invalid_argument("steer: each item is (label or vector, layer, coefficient)");
    const auto layer = fields[1].cast<int64_t>();
    const auto coefficient = fields[2].cast<double>();
    steering::check_coefficient(coefficient, "steer[" + std::to_string(index++) + "]");
    if (py::isinstance<py::str>(fields[0])) {
      if (probes_dir.empty()) {
        throw std::invalid_argument("steer: the label '" + fields[0].cast<std::string>() +
                                    "' needs probes (pass probes=...) for its direction");
      }
      spec.ops.push_back(steering::SteeringOp::probe(steering::SteeringAction::kAdd, fields[0].cast<std::string>(),
                                                     std::to_string(layer), coefficient));
    } else {
      spec.ops.push_back(steering::SteeringOp::given(steering::SteeringAction::kAdd, fields[0].cast<std::vector<float>>(),
                                                     layer, coefficient));
    }
  }
  return spec;
}

}  // namespace probekit::python

PYBIND11_MODULE(_native, module) {
  using namespace probekit;
  using namespace probekit::python;
  module.doc() = "probekit's native library (use the probekit package, not this module)";
  py::register_exception_translator(translate_exception);
  module.def("request_interrupt", &request_interrupt, "Asks every running call to stop at its next step (progress report or forward pass)");
  module.def("clear_interrupt", &clear_interrupt, "Forgets an interruption request (once the interrupted call ended)");
  bind_model(module);
  bind_probes(module);
  bind_tools(module);
  bind_sae(module);
}
