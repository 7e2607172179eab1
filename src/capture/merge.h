// Joining the layer files of a capture run split with --shard I/N (each shard a contiguous range of the run's
// example order, written to shard_I_of_N/) into one set, with every split's rows in the run's order.
#pragma once

#include <string>
#include <vector>

namespace probekit::capture {

struct MergeOptions {
  bool gzip = false;
  bool overwrite = false;
  // Write HDF5 virtual datasets over the shard files instead of copying their rows: instant whatever the
  // size, but the merged files read the shard files, which must stay where they are relative to them.
  bool virtual_files = false;
};

/// Merges `shard_dirs` (all N shards of one run, in any order) into layer files in `output_dir`, one for every layer
/// the run captured; returns the files written. Throws naming the shard files that are missing, incomplete or from
/// another run, and the outputs that exist without `overwrite`, before anything is written.
std::vector<std::string> merge_shards(const std::vector<std::string>& shard_dirs, const std::string& output_dir,
                                      const MergeOptions& options);

/// The shard directories (shard_I_of_N) inside `dir`, sorted by shard.
std::vector<std::string> find_shard_dirs(const std::string& dir);

}  // namespace probekit::capture
