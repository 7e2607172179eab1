// calibrate_probes: sets trained probes' thresholds at a target false-positive rate on a capture of ordinary data
// (benign conversations, read as the probes' activations were), recording each in probes.json as its calibration.
#include <fmt/format.h>

#include "cli/torch/torch_tool.h"
#include "common/terminal_text.h"
#include "probes/calibration.h"

using namespace probekit;

int main(int argc, char** argv) {
  return run_tool_main<probes::CalibrationOptions>(
      argc, argv, "Set probes' thresholds at a target false-positive rate on ordinary data", probes::add_calibration_flags,
      [](probes::CalibrationOptions& options) {
        const Json summary = probes::calibrate(options);
        if (options.json) return fmt::print("{}\n", dump_json(summary, 2));
        for (const Json& layer : summary["layers"]) {
          for (const Json& probe : layer["probes"]) {
            const Json& c = probe["calibration"];
            // Monitors compare each token with the per-token threshold, where there is one.
            const std::string per_token =
                c.contains("per_token") ? fmt::format(", per token {:.6g}", c["per_token"]["threshold"].get<double>()) : "";
            fmt::print("layer {} {}: threshold {:.6g}{}, flags {:.4f} of {} examples (95% {:.4f}-{:.4f})\n",
                       layer["layer"].get<int64_t>(), terminal_text(probe["label"].get<std::string>()),
                       c["threshold"].get<double>(), per_token, c["fpr"].get<double>(), c["examples"].get<int64_t>(),
                       c["fpr_ci95"][0].get<double>(), c["fpr_ci95"][1].get<double>());
          }
        }
      });
}
