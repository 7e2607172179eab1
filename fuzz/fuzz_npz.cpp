// The .npz reader (io/npz.h) on arbitrary bytes: every input is refused with a message or gives arrays whose bytes
// are as many as their dtype and shape say. Touching every byte lets AddressSanitizer check the copies.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "io/npz.h"

using namespace probekit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy sized exactly to the input, so a read one byte past it is caught.
  std::vector<uint8_t> bytes(data, data + size);
  std::map<std::string, npz::Array> arrays;
  if (!fuzz::completes_or_refuses_cleanly([&] { arrays = npz::read_bytes(bytes.data(), bytes.size(), "input"); })) {
    return 0;
  }
  volatile uint8_t sink = 0;
  for (const auto& [name, array] : arrays) {
    uint64_t elements = 1;
    for (int64_t dim : array.shape) elements *= static_cast<uint64_t>(dim);
    if (elements * npz::dtype_size(array.dtype) != array.bytes.size()) {
      fuzz::finding("array '" + name + "' holds another number of bytes than its dtype and shape say");
    }
    for (uint8_t b : array.bytes) sink = sink ^ b;
  }
  return 0;
}
