// Reading a tensor of a safetensors file into a CPU tensor of its own dtype, for tests that compare with
// reference files (the library itself only ever reads weights through WeightScope), and writing fp32 tensors into one.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "io/safetensors.h"
#include "model/weights.h"

namespace probekit::testing {

inline at::Tensor read_tensor(const safetensors::File& file, const safetensors::TensorInfo& info) {
  auto* data = const_cast<uint8_t*>(file.data(info));
  return at::from_blob(data, info.shape, at::TensorOptions().dtype(model::aten_dtype(info.dtype))).clone();
}

/// Writes `tensors` (fp32, contiguous, on the CPU) under their names into the safetensors file `path`.
inline void write_fp32_tensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::vector<safetensors::TensorData> data;
  for (const auto& [name, t] : tensors) data.push_back({name, safetensors::DType::kF32, t.sizes().vec(), t.data_ptr(), t.nbytes()});
  safetensors::write_file(path, data);
}

/// Rewrites the safetensors file `path` in fp32 with element 0 of its tensor `name` set to `value` (a damaged or
/// retrained copy of a fixture).
inline void set_first_element(const std::string& path, const std::string& name, float value) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  {
    const safetensors::File file(path);
    for (const safetensors::TensorInfo& info : file.tensors()) {
      at::Tensor t = read_tensor(file, info).to(at::kFloat).contiguous();
      if (info.name == name) t.view(-1)[0] = value;
      tensors.emplace_back(info.name, t);
    }
  }
  write_fp32_tensors(path, tensors);
}

}  // namespace probekit::testing
