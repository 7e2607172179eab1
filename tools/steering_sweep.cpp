// steering_sweep: causal validation of probes. For each label and coefficient, generations from every prompt with
// the label's probe direction added at one layer, measured by the label's probe, every other label's, and the
// fluency cost (KL from the unsteered model, perplexity); OUT/sweep.json and OUT/sweep.html.
#include <fmt/format.h>

#include "cli/torch/torch_tool.h"
#include "common/terminal_text.h"
#include "sweep/sweep.h"

using namespace probekit;

int main(int argc, char** argv) {
  return run_tool_main<sweep::SweepOptions>(
      argc, argv, "Steer along probe directions at several coefficients and measure the effect and its cost",
      sweep::add_sweep_flags, [](sweep::SweepOptions& options) {
        const Json summary = sweep::run_sweep(options);
        fmt::print("{:<28} {:>8} {:>8} {:>8} {:>12} {:>8}\n", "label", "coef", "score", "shift", "off-target", "KL");
        for (const Json& p : summary["summary"]) {
          const Json& off_target = p["off_target_mean_abs_shift"];  // null: no other label
          fmt::print("{:<28} {:>8g} {:>8.4f} {:>+8.4f} {:>12} {:>8.4f}\n", terminal_text(p["label"].get<std::string>()),
                     p["coefficient"].get<double>(), p["score_mean"].get<double>(), p["score_shift"].get<double>(),
                     off_target.is_null() ? std::string("-") : fmt::format("{:.4f}", off_target.get<double>()),
                     p["kl_mean"].get<double>());
        }
        // A cell is a (label, coefficient, prompt) of the sweep; the prompts' unsteered baselines serve every label.
        const auto resumed = summary["resumed_generations"].get<int64_t>();
        fmt::print("{:g} cells ({} generations{}) in {:.2f} s ({:.1f} cells/s); wrote {}/sweep.json and sweep.html\n",
                   summary["cells"].get<double>(), summary["generations"].get<int64_t>(),
                   resumed > 0 ? fmt::format(", {} kept from an interrupted run", resumed) : "",
                   summary["seconds"].get<double>(), summary["cells_per_s"].get<double>(), options.output_dir);
      },
      sweep::kSweepInterruptNote);
}
