// probekit.load_sae and an SAE's encode and decode: the library's readers and formulas (src/sae), tensors crossing as
// DLPack capsules.
#include <fmt/ranges.h>

#include <algorithm>

#include "native.h"
#include "sae/sae.h"

namespace probekit::python {

namespace {

using SaeHandle = std::shared_ptr<sae::SparseAutoencoder>;

// Rows [..., d_in] or latents [..., d_sae] as a matrix [N, width] (fp32 on the host), and the shape to give back.
at::Tensor as_rows(const py::capsule& capsule, int64_t width, const char* what, std::vector<int64_t>& shape) {
  at::Tensor tensor = from_dlpack(capsule).to(at::kCPU, at::kFloat);
  if (tensor.dim() == 0 || tensor.size(-1) != width) {
    throw std::invalid_argument(fmt::format("{} of shape [{}]: the last dimension must be {}", what,
                                            fmt::join(tensor.sizes(), ", "), width));
  }
  shape.assign(tensor.sizes().begin(), tensor.sizes().end());
  return tensor.reshape({-1, width});
}

py::capsule encode(const SaeHandle& sae, const py::capsule& rows) {
  std::vector<int64_t> shape;
  const at::Tensor x = as_rows(rows, sae->d_in, "rows", shape);
  shape.back() = sae->d_sae;
  at::Tensor latents;
  {
    py::gil_scoped_release release;
    latents = sae->encode(x).reshape(shape);
  }
  return to_dlpack(latents);  // a Python object: made with the GIL
}

py::capsule decode(const SaeHandle& sae, const py::capsule& latents, const py::object& rows) {
  std::vector<int64_t> shape, row_shape;
  const at::Tensor z = as_rows(latents, sae->d_sae, "latents", shape);
  at::Tensor x;
  if (rows.is_none()) {
    if (sae->scaling == sae::InputScaling::kConstantNormRescale && !sae->is_transcoder()) {
      throw std::invalid_argument(fmt::format("SAE '{}' rescales each row to norm sqrt(d_in): decode needs the rows "
                                              "(decode(latents, rows))", sae->name));
    }
    if (sae->w_skip.defined()) {
      throw std::invalid_argument(fmt::format("transcoder '{}' adds a skip connection from its input: decode needs the "
                                              "rows (decode(latents, rows))", sae->name));
    }
    x = at::ones({z.size(0), sae->d_in});
  } else {
    x = as_rows(rows.cast<py::capsule>(), sae->d_in, "rows", row_shape);
    // Each row of latents decodes with the row it was encoded from: no broadcasting of one over the other.
    if (!std::equal(shape.begin(), shape.end() - 1, row_shape.begin(), row_shape.end() - 1)) {
      throw std::invalid_argument(fmt::format("latents of shape [{}] and rows of shape [{}]: the rows must be the ones "
                                              "encoded, of the latents' shape but the last dimension",
                                              fmt::join(shape, ", "), fmt::join(row_shape, ", ")));
    }
  }
  shape.back() = sae->d_out;
  at::Tensor reconstruction;
  {
    py::gil_scoped_release release;
    reconstruction = sae->decode(z, x).reshape(shape);
  }
  return to_dlpack(reconstruction);  // a Python object: made with the GIL
}

}  // namespace

void bind_sae(py::module_& module) {
  py::class_<sae::SparseAutoencoder, SaeHandle>(module, "SparseAutoencoder");
  module.def(
      "load_sae",
      [](const std::string& path, const std::string& name) {
        py::gil_scoped_release release;
        return std::make_shared<sae::SparseAutoencoder>(sae::load(path, name));
      },
      py::arg("path"), py::arg("name"));
  module.def("sae_record", [](const SaeHandle& sae) { return sae->record().dump(); }, py::arg("sae"));
  module.def("sae_encode", &encode, py::arg("sae"), py::arg("rows"));
  module.def("sae_decode", &decode, py::arg("sae"), py::arg("latents"), py::arg("rows"));
}

}  // namespace probekit::python
