// make_steering_vectors: a label's steering vector at each captured layer, from activations (mean difference) or its
// probes (their directions), written as our .safetensors or as a GGUF control vector llama.cpp reads.
#include <fmt/format.h>

#include "cli/torch/torch_tool.h"
#include "steering/make_vectors.h"

using namespace probekit;

int main(int argc, char** argv) {
  return run_tool_main<steering::MakeVectorsOptions>(
      argc, argv, "Make a label's steering vectors from captured activations or its probes",
      steering::add_make_vectors_flags, [](steering::MakeVectorsOptions& options) {
        const Json summary = steering::make_and_write_vectors(options);
        for (const Json& layer : summary["layers"]) {
          fmt::print("layer {}: norm {:.6g}\n", layer["layer"].get<int64_t>(), layer["norm"].get<double>());
        }
        fmt::print("wrote {} ({} layers, {})\n", options.output, summary["layers"].size(), options.method);
      });
}
