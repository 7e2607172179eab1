// Loading a probes directory for inference (ProbeSet::load, as multi_probe_inference does): the input
// is a probes.json index and one probe safetensors file, laid out as a 4-byte little-endian length, the
// index's bytes, then the file's bytes. The directory is refused with a message, or loads into probes that
// score a batch of activations.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "common/files.h"
#include "fuzz_util.h"
#include "probes/probe_files.h"

using namespace probekit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  size_t index_size = data[0] | data[1] << 8 | data[2] << 16 | static_cast<size_t>(data[3]) << 24;
  if (index_size > size - 4) return 0;
  static const std::string directory = [] {
    std::string path = fuzz::scratch_path("probes");
    make_directories(path);
    return path;
  }();
  fuzz::write_bytes(directory + "/probes.json", data + 4, index_size);
  fuzz::write_bytes(directory + "/probe_a.safetensors", data + 4 + index_size, size - 4 - index_size);

  std::optional<probes::ProbeSet> set;
  if (!fuzz::completes_or_refuses_cleanly([&] { set = probes::ProbeSet::load(directory, at::kCPU, at::kFloat); })) {
    return 0;
  }
  at::Tensor logits = set->logits(at::ones({2, set->shape().input_dim}));
  if (logits.size(0) != 2 || logits.size(1) != static_cast<int64_t>(set->probes().size())) {
    fuzz::finding("logits are not [rows, probes]");
  }
  return 0;
}
