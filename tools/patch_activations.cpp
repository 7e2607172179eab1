// patch_activations: activation patching of a clean and a corrupted prompt, a layer x position grid per site
// (exact, batched, or by attribution patching), written as patching.json and a heatmap page.
#include <fmt/format.h>

#include "cli/torch/torch_tool.h"
#include "patching/patch_tool.h"

using namespace probekit;

int main(int argc, char** argv) {
  return run_tool_main<patching::PatchActivationsOptions>(
      argc, argv, "Activation patching: where the information that decides the next token lives",
      patching::add_patch_flags, [](patching::PatchActivationsOptions& options) {
        const Json result = patching::run_patch_activations(options);
        const Json& patched = result["patched"];
        fmt::print("metric {}: clean {:.6g}, corrupted {:.6g}\n", result["metric"]["formula"].get<std::string>(),
                   result["clean_metric"].get<double>(), result["corrupted_metric"].get<double>());
        fmt::print("wrote {}/patching.json and patching.html: {} site(s) x {} layers x {} positions in {:.2f} s\n",
                   options.output_dir, patched["sites"].size(), patched["layers"].size(), patched["positions"].size(),
                   result["seconds"].get<double>());
      },
      patching::kPatchInterruptNote);
}
