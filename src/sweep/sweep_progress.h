// A sweep's finished generations, kept as they finish in OUT.progress.jsonl beside its output directory, so that a
// sweep stopped by Ctrl-C, an error or a lost machine goes on with --resume rather than from its first cell. The
// file's first line is what the sweep was made with (its settings); each further line is one cell's generation.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/json.h"
#include "sweep/fluency.h"

namespace probekit::sweep {

/// One generation of the sweep, as measured.
struct CellResult {
  std::vector<int32_t> prompt_ids, ids;
  std::string text, stop;
  std::vector<std::vector<double>> scores;  // [token][label]: every probe of the layer, the text so far
  Fluency fluency;
};

/// The progress file of the sweep into `output_dir`.
std::string progress_path(const std::string& output_dir);

class SweepProgress {
 public:
  /// Opens and locks the progress file of `output_dir` (two sweeps into one directory would interleave their lines).
  /// One holding generations is refused unless `resume` (go on from them) or `overwrite` (start again, said in a
  /// warning): checked before the model loads.
  SweepProgress(const std::string& output_dir, bool resume, bool overwrite);
  /// Without remove(), the file stays for --resume when it holds a generation, and goes when it holds none.
  ~SweepProgress();
  SweepProgress(const SweepProgress&) = delete;
  SweepProgress& operator=(const SweepProgress&) = delete;

  /// For a sweep of `cells` generations scored by `labels` probes, made with `settings`: with --resume, reads the
  /// generations kept (refused when they were made with other settings, naming the first that differs); otherwise
  /// starts the file afresh.
  void start(const Json& settings, size_t cells, size_t labels);
  /// The cells a stopped run finished, by their index in the sweep.
  const std::map<size_t, CellResult>& kept() const { return kept_; }
  /// Appends finished cells (index, result) to the file, on disk once this returns.
  void append(const std::vector<std::pair<size_t, const CellResult*>>& finished);
  /// How many generations the file holds.
  size_t cells_in_file() const { return cells_in_file_; }
  /// Removes the file once the outputs are in place.
  void remove();
  const std::string& path() const { return path_; }

 private:
  void lock_file();
  void read(const Json& settings, size_t cells, size_t labels);
  void truncate_to(size_t bytes);
  std::string path_;
  bool resume_ = false, overwrite_ = false;
  int fd_ = -1;       // open and locked (flock) for the run
  std::string text_;  // what the file held when it was opened
  size_t cells_in_file_ = 0;
  std::map<size_t, CellResult> kept_;
};

}  // namespace probekit::sweep
