// The activation files shared by capture, training and inference: one HDF5 file per layer,
// `layer_{L}_activations.h5`, in the reference's layout (groups train/val/test with `activations` float32
// [N, H] and `labels` int64 [N], readable by its h5py loader unchanged) plus our extensions: `example_index`
// (the example's 0-based line in the dataset), per-token `offsets`/`token_ids`/`positions` for position "all" (a
// conversation's masked tokens only, `positions` saying where each stands in its ids), optional
// metadata columns, and root attributes describing how the file was made. A file of site "experts" holds the
// experts a router chose instead of activations: `expert_ids` int32 [N, k] and `expert_weights` float32 [N, k].
//
// Writing is crash-safe: a file is written as `<name>.partial` whose layout is fixed at creation (every chunk
// allocated, so later writes touch raw data only), `<name>.partial.progress` records how many examples are on
// disk after each commit, and the file gets `complete = 1` and its final name only when finished (compressed
// files are compressed then, from the uncompressed partial file).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "activations/readout_recipe.h"
#include "io/hdf5.h"
#include "sites/sites.h"

namespace probekit::activations {

enum class Split { kTrain = 0, kVal = 1, kTest = 2 };
constexpr std::array<Split, 3> kSplits = {Split::kTrain, Split::kVal, Split::kTest};
const char* split_name(Split split);

/// Root attributes of an activation file.
struct FileAttributes {
  ReadoutRecipe recipe;         // what the rows were read with
  std::vector<int64_t> layers;  // every layer captured in the run
  int64_t layer = -1;           // the layer this file holds
  std::vector<std::string> label_names;
  int64_t hidden_size = 0;  // a row's width: the hidden size; experts for site "router"; k for site "experts"; the
                            // SAE's d_sae for its latents, d_in for its error
  std::string dataset;
  std::string dataset_sha256;
  std::string tool_version;
  std::string split_ratios;  // "0.7,0.15,0.15"
  int64_t seed = 42;
  // Which lines of the dataset became examples, and what was read from them.
  int64_t max_examples = 0;  // 0: all
  std::string text_field, label_field;
  std::vector<std::string> keep_fields;
  bool skip_invalid = false;
  std::string batching;    // how the run cut its batches, reused when it resumes
  std::string shard;       // "I/N" for one of N shards of a run (see capture/merge.h); empty otherwise

  /// The attributes a resumed run must share with the partial file, as "name=value" lines.
  std::vector<std::string> identity() const;
  /// The first attribute of the identity in which a file `made` with other settings differs from these,
  /// as "made with X but this run has Y"; empty when they agree.
  std::string identity_difference(const FileAttributes& made) const;
  /// Whether the file holds expert choices (site "experts") rather than activations.
  bool holds_expert_choices() const { return recipe.site == Site::kExperts && !recipe.sae; }
  /// Whether the file holds an SAE's latents as each row's top k (hidden_size: the dictionary's width).
  bool holds_sparse_latents() const { return recipe.sae && recipe.sae->sparse(); }
  /// Floats per row as ActivationWriter::write_rows takes rows and read_activation_rows gives them:
  /// hidden_size; for expert choices the k ids (exact in fp32) followed by the k weights; for sparse latents
  /// sparse_latent_row_width(top_k).
  int64_t row_width() const;
};

// A dataset of a group's rows: [N, width] (width 0: [N], one value a row), float32 or int32, and where its values sit
// among the floats of a row as ActivationWriter::write_rows takes them and read_activation_rows gives them.
struct RowDataset {
  const char* name;
  bool integer;
  int64_t width;
  int64_t offset;  // the row's first float that is this dataset's

  // HDF5's type ids are only valid once the library has started: looked up when used.
  hid_t file_type() const { return integer ? H5T_STD_I32LE : H5T_IEEE_F32LE; }
  hid_t memory_type() const { return integer ? H5T_NATIVE_INT32 : H5T_NATIVE_FLOAT; }
  int64_t columns() const { return width == 0 ? 1 : width; }
  std::vector<hsize_t> dims(int64_t rows) const;
};

/// The row datasets of a file made with `attributes`: `activations`; or a router's choices, `expert_ids` and
/// `expert_weights` [N, k]; or an SAE's sparse latents, `latent_indices` and `latent_values` [N, K], `l0` and
/// `relative_error` [N].
std::vector<RowDataset> row_datasets(const FileAttributes& attributes);

/// One group of a file, fully loaded.
struct SplitData {
  int64_t rows = 0;  // rows of `activations`: examples, or tokens for position "all"
  int64_t hidden = 0;
  std::vector<float> activations;       // [rows, hidden], row-major; empty for expert choices
  std::vector<int32_t> expert_ids;      // site "experts": [rows, k], most probable first
  std::vector<float> expert_weights;    // site "experts": [rows, k]
  // Sparse SAE latents as stored (`activations` holds them densified, [rows, d_sae]): each row's top K latents, index
  // -1 and value 0 past the row's L0.
  int64_t top_k = 0;
  std::vector<int32_t> latent_indices;  // [rows, K]
  std::vector<float> latent_values;     // [rows, K]
  std::vector<int32_t> l0;              // [rows]: latents not zero
  std::vector<float> relative_error;    // [rows]: |x - reconstruction| / |x|
  std::vector<int64_t> labels;          // [examples]
  std::vector<int64_t> example_index;   // [examples]; empty in reference files
  std::vector<int64_t> offsets;         // [examples + 1]; position "all" only
  std::vector<int64_t> token_ids;       // [rows]; position "all" only
  std::vector<int64_t> positions;       // [rows]; position "all": each row's token index in its example's ids (0:
                                        // the first); empty in files written before it
  std::vector<int64_t> token_labels;    // [rows]; position "all" of conversations with "spans": each row's label
  std::map<std::string, std::vector<std::string>> metadata;  // --keep-fields columns

  int64_t examples() const { return static_cast<int64_t>(labels.size()); }
};

struct ActivationFile {
  std::string path;
  FileAttributes attributes;
  std::array<SplitData, 3> splits;

  SplitData& split(Split s) { return splits[static_cast<size_t>(s)]; }
  const SplitData& split(Split s) const { return splits[static_cast<size_t>(s)]; }
};

/// Reads a complete activation file (ours or the reference's) and validates it: groups and datasets present,
/// shapes consistent, labels inside label_names, every activation finite. Errors name the file, group and row.
ActivationFile read_activation_file(const std::string& path);

/// Reads only the root attributes (and checks the file is complete).
FileAttributes read_attributes(const std::string& path);

/// Expands inputs (files, or directories holding layer_{L}_activations.h5) into files sorted by layer.
std::vector<std::string> find_activation_files(const std::vector<std::string>& inputs);

/// The file name of a layer: layer_{L}_activations.h5.
std::string layer_file_name(int64_t layer);

/// The layer number in a name like layer_25_activations.h5, or -1.
int64_t layer_from_file_name(const std::string& path);

/// What the writer needs to lay out one group before any activation arrives.
struct SplitLayout {
  std::vector<int64_t> labels;
  std::vector<int64_t> example_index;
  std::vector<int64_t> offsets;    // position "all": [examples + 1] row offsets
  std::vector<int64_t> token_ids;  // position "all": [rows]
  std::vector<int64_t> positions;  // position "all": [rows], each row's token index in its example's ids
  std::vector<int64_t> token_labels;  // position "all" of labelled spans: [rows], each row's label
  std::map<std::string, std::vector<std::string>> metadata;

  int64_t examples() const { return static_cast<int64_t>(labels.size()); }
  int64_t rows() const { return offsets.empty() ? examples() : offsets.back(); }
};

/// Streams activations into `<final>.partial`, then publishes the finished file under its final name.
class ActivationWriter {
 public:
  /// Starts a new partial file, writing labels, indexes and metadata of every group up front.
  static ActivationWriter create(const std::string& final_path, const FileAttributes& attributes,
                                 const std::array<SplitLayout, 3>& layouts, bool gzip);
  /// Reopens the partial file of an interrupted run; throws if it was made with other settings.
  static ActivationWriter resume(const std::string& final_path, const FileAttributes& attributes);

  /// Examples of the run (train, then val, then test) whose activations are on disk.
  int64_t examples_done() const { return examples_done_; }
  /// Writes rows [row, row + rows) of a group, each FileAttributes::row_width() floats.
  void write_rows(Split split, int64_t row, int64_t rows, const float* data);
  /// Records that the first `examples_done` examples are complete and flushes them to disk.
  void commit(int64_t examples_done);
  /// The root attributes the file was created with.
  FileAttributes attributes() const;
  /// Marks the file complete and renames it to its final name.
  void finish();

  const std::string& partial_path() const { return partial_path_; }
  const std::string& final_path() const { return final_path_; }

 private:
  ActivationWriter(std::string final_path, hdf5::Handle file, const FileAttributes& attributes);
  void open_datasets();

  std::string final_path_, partial_path_;
  hdf5::Handle file_;
  std::vector<RowDataset> datasets_;                       // what a row is stored as
  std::array<std::vector<hdf5::Handle>, 3> datasets_open_;  // per split, in datasets_' order
  int64_t row_width_ = 0;
  int64_t examples_done_ = 0;
};

/// Reads a complete file's layouts: everything but the activations.
std::array<SplitLayout, 3> read_layouts(const std::string& path);

/// One shard's file of a run and its layouts, as a virtual merge maps them.
struct ShardRows {
  std::string path;
  std::array<SplitLayout, 3> layouts;
};

/// Writes `path`, a complete activation file whose activations (or expert choices), labels, example_index and
/// token_ids are HDF5 virtual datasets over the shards' files one after the other, nothing copied, the shards
/// named by paths relative to `path`'s directory. What depends on the shard is stored: the rebased `offsets`
/// of position "all" (from `merged`) and the metadata columns.
void write_virtual_file(const std::string& path, const FileAttributes& attributes, const std::vector<ShardRows>& shards,
                        const std::array<SplitLayout, 3>& merged);

/// Reads rows [row, row + rows) of a group into `out` (rows x FileAttributes::row_width() floats).
void read_activation_rows(const std::string& path, Split split, int64_t row, int64_t rows, float* out);

/// Path of the partial file that belongs to a final path.
std::string partial_path_for(const std::string& final_path);
/// Whether an interrupted run of this final path committed anything (a partial file without a record was
/// killed while being created and is simply made again).
bool has_progress_record(const std::string& final_path);

}  // namespace probekit::activations
