// merge_activations: joins the layer files of a capture run split with capture_activations --shard I/N.
#include <fmt/format.h>

#include "capture/merge.h"
#include "cli/cli.h"

using namespace probekit;

int main(int argc, char** argv) {
  ToolCommandLine tool("Join the activation files of the shards of a capture run (capture_activations --shard I/N)");
  std::string output_dir;
  std::vector<std::string> shard_dirs;
  std::string compression = "none";
  capture::MergeOptions options;
  tool.app.add_option("--output-dir", output_dir, "Where the merged layer files go (and, by default, where the shard_I_of_N "
                                             "directories are)")->required();
  tool.app.add_option("shards", shard_dirs, "Shard directories (default: OUTPUT_DIR/shard_*_of_N)");
  tool.app.add_option("--compression", compression, "gzip|none")->check(CLI::IsMember({"gzip", "none"}))->capture_default_str();
  tool.app.add_flag("--overwrite", options.overwrite, "Replace existing merged files");
  tool.app.add_flag("--virtual", options.virtual_files,
                    "Write HDF5 virtual datasets over the shard files instead of copying them (instant; the shard "
                    "files must stay where they are, relative to the merged files)");
  return tool.run(argc, argv, [&] {
    if (shard_dirs.empty()) shard_dirs = capture::find_shard_dirs(output_dir);
    options.gzip = compression == "gzip";
    std::vector<std::string> files = capture::merge_shards(shard_dirs, output_dir, options);
    fmt::print("Merged {} shards into {} {}layer files:\n", shard_dirs.size(), files.size(),
               options.virtual_files ? "virtual " : "");
    for (const std::string& file : files) fmt::print("  {}\n", file);
  });
}
