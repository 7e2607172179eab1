#include "generation/flags.h"

#include <spdlog/spdlog.h>

#include "cli/cli.h"

namespace probekit::generation {

void add_generation_flags(CLI::App& app, GenerationFlags& flags) {
  GenerationOptions& o = flags.options;
  flags.from_command_line = true;
  app.add_option("--max-new-tokens", o.max_new_tokens, "Tokens to generate after each prompt (at most)")
      ->capture_default_str()
      ->check(at_least(1));
  app.add_option("--temperature", o.sampling.temperature, "Sampling temperature; 0: greedy")->capture_default_str();
  app.add_option("--sample-top-k", o.sampling.top_k, "Sample among the k most probable tokens; 0: all")
      ->capture_default_str();
  app.add_option("--top-p", o.sampling.top_p, "Sample among the most probable tokens whose probabilities reach p")
      ->capture_default_str();
  app.add_option("--seed", o.sampling.seed, "Seed of the sampling")->capture_default_str()->check(at_least(0));
  app.add_flag("--no-stop", flags.no_stop,
               "Never choose the model's eos tokens (generation_config.json), so that every prompt gets "
               "--max-new-tokens tokens (transformers' min_new_tokens)");
}

GenerationOptions resolve_generation_flags(const GenerationFlags& flags, const std::string& model_dir) {
  GenerationOptions options = flags.options;
  check_sampling(options.sampling);
  const Sampling& s = options.sampling;
  // Greedy decoding reads none of them (regression: taken without a word, as if they sampled). Only flags: a request
  // (the server, the Python package) draws a seed of its own.
  if (flags.from_command_line && s.temperature == 0 && (s.top_k != 0 || s.top_p != 1.0 || s.seed != 0)) {
    spdlog::warn("--sample-top-k, --top-p and --seed change nothing at --temperature 0 (greedy decoding): give a "
                 "temperature above 0 to sample");
  }
  (flags.no_stop ? options.suppressed_ids : options.stop_ids) = read_stop_ids(model_dir);
  return options;
}

}  // namespace probekit::generation
