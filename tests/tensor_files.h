// Reading a tensor of a safetensors file into a CPU tensor of its own dtype, for tests that compare with
// reference files (the library itself only ever reads weights through WeightScope).
#pragma once

#include <ATen/ATen.h>

#include "io/safetensors.h"
#include "model/weights.h"

namespace probekit::testing {

inline at::Tensor read_tensor(const safetensors::File& file, const safetensors::TensorInfo& info) {
  auto* data = const_cast<uint8_t*>(file.data(info));
  return at::from_blob(data, info.shape, at::TensorOptions().dtype(model::aten_dtype(info.dtype))).clone();
}

}  // namespace probekit::testing
