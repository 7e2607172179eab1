// The safetensors header parser on arbitrary bytes: every input is refused with a message or gives tensors
// whose byte ranges lie inside the input, in data order, without overlap, each as long as its dtype and shape
// say. Touching every byte of every tensor lets AddressSanitizer check the ranges against the real buffer.
#include <cstdint>
#include <vector>

#include "fuzz_util.h"
#include "io/safetensors.h"

using namespace probekit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy sized exactly to the input, so a read one byte past it is caught.
  std::vector<uint8_t> bytes(data, data + size);
  safetensors::Header header;
  if (!fuzz::completes_or_refuses_cleanly([&] { header = safetensors::parse_header(bytes.data(), bytes.size(), "input"); })) {
    return 0;
  }
  uint64_t previous_end = 0;
  volatile uint8_t sink = 0;
  for (const safetensors::TensorInfo& tensor : header.tensors) {
    if (tensor.data_begin < previous_end || tensor.data_end < tensor.data_begin || tensor.data_end > size) {
      fuzz::finding("tensor '" + tensor.name + "' has a byte range outside the data or overlapping another");
    }
    uint64_t elements = 1;
    for (int64_t dim : tensor.shape) {
      if (dim < 0) fuzz::finding("tensor '" + tensor.name + "' has a negative dimension");
      elements *= static_cast<uint64_t>(dim);
    }
    if (elements * safetensors::dtype_size(tensor.dtype) != tensor.nbytes()) {
      fuzz::finding("tensor '" + tensor.name + "' has a byte length that disagrees with its shape");
    }
    for (uint64_t i = tensor.data_begin; i < tensor.data_end; ++i) sink = sink ^ bytes[i];
    previous_end = tensor.data_end;
  }
  return 0;
}
