// make_example: writes the built-in example data (a labelled JSONL dataset from templates) and a small
// random-weight checkpoint, for trying the tools where no real weights can be downloaded.
#include <fmt/format.h>

#include "cli/torch/torch_tool.h"
#include "data/example_generator.h"
#include "model/random_checkpoint.h"

using namespace probekit;

int main(int argc, char** argv) {
  TorchTool tool("Write the built-in example dataset and a small random-weight checkpoint");
  tool.app.require_subcommand(1);

  data::ExampleSetOptions dataset_options;
  std::string dataset_output;
  CLI::App* dataset = tool.app.add_subcommand("dataset", "A labelled JSONL dataset (text, cognitive_action, domain)");
  dataset->add_option("--output", dataset_output, "JSONL file to write")->required();
  dataset->add_option("--labels", dataset_options.labels, "How many labels (1 to 45)")->capture_default_str();
  dataset->add_option("--per-label", dataset_options.per_label, "Texts per label")->capture_default_str();
  dataset->add_option("--min-chars", dataset_options.min_chars, "Shortest text")->capture_default_str();
  dataset->add_option("--max-chars", dataset_options.max_chars, "Longest text")->capture_default_str();
  dataset->add_option("--seed", dataset_options.seed, "Random seed")->capture_default_str();
  bool overwrite_dataset = false;
  dataset->add_flag("--overwrite", overwrite_dataset, "Replace an existing file");

  model::RandomCheckpointOptions model_options;
  std::string model_output;
  CLI::App* model_cmd = tool.app.add_subcommand(
      "model", "A random-weight Gemma 3 text checkpoint with the given tokenizer (one with Gemma's special tokens)");
  model_cmd->add_option("--output", model_output, "Checkpoint directory to write")->required();
  model_cmd->add_option("--tokenizer", model_options.tokenizer_json, "tokenizer.json to ship with it")->required();
  model_cmd->add_option("--hidden-size", model_options.hidden_size, "The hidden size")->capture_default_str();
  model_cmd->add_option("--layers", model_options.layers, "Decoder layers")->capture_default_str();
  model_cmd->add_option("--heads", model_options.heads, "Query heads")->capture_default_str();
  model_cmd->add_option("--kv-heads", model_options.kv_heads, "Key-value heads")->capture_default_str();
  model_cmd->add_option("--head-dim", model_options.head_dim, "Each head's width")->capture_default_str();
  model_cmd->add_option("--intermediate-size", model_options.intermediate_size, "The MLP's width")->capture_default_str();
  model_cmd->add_option("--seed", model_options.seed, "Seed of the random weights")->capture_default_str();
  add_overwrite_flag(*model_cmd, model_options.overwrite, "--output");

  return tool.run(argc, argv, [&] {
    if (dataset->parsed()) {
      size_t written = data::write_example_dataset(dataset_output, dataset_options, overwrite_dataset);
      fmt::print("wrote {} examples ({} labels x {}) to {}\n", written, dataset_options.labels,
                 dataset_options.per_label, dataset_output);
    }
    if (model_cmd->parsed()) {
      model::write_random_checkpoint(model_output, model_options);
      fmt::print("wrote a random-weight gemma3_text checkpoint (hidden {}, {} layers) to {}\n", model_options.hidden_size,
                 model_options.layers, model_output);
    }
  });
}
