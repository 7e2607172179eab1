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
  /// Opens the progress file of `output_dir` for a sweep of `cells` generations scored by `labels` probes, made with
  /// `settings`. A kept one is read with `resume` (refused when it was made with other settings, naming the first
  /// that differs), replaced with `overwrite`, and otherwise refused (naming --resume); without one, --resume starts
  /// from the first cell.
  SweepProgress(const std::string& output_dir, const Json& settings, size_t cells, size_t labels, bool resume,
                bool overwrite);
  /// Without remove(), the file stays for --resume when it holds a generation, and goes when it holds none.
  ~SweepProgress();
  SweepProgress(const SweepProgress&) = delete;
  SweepProgress& operator=(const SweepProgress&) = delete;

  /// The cells a stopped run finished, by their index in the sweep.
  const std::map<size_t, CellResult>& kept() const { return kept_; }
  /// Appends finished cells (index, result) to the file: once this returns, a stop of the process loses none of them.
  void append(const std::vector<std::pair<size_t, const CellResult*>>& finished);
  /// Removes the file once the outputs are in place.
  void remove();
  const std::string& path() const { return path_; }

 private:
  void open_locked(const std::string& output_dir, const Json& settings, size_t cells, size_t labels, bool resume,
                   bool overwrite);
  void read(const std::string& text, const Json& settings, size_t cells, size_t labels);
  void truncate_to(size_t bytes);
  std::string path_;
  int fd_ = -1;  // open and locked (flock) for the run
  size_t cells_in_file_ = 0;
  std::map<size_t, CellResult> kept_;
};

}  // namespace probekit::sweep
