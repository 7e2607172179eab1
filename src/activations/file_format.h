// The HDF5 layout shared by the activation files' reader, writer and virtual merges (internal to activations/): the
// root attributes, the integer datasets, the row datasets a group may hold and their chunking.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "activations/activation_store.h"
#include "io/hdf5.h"

namespace probekit::activations::format {

/// The root attribute a file in progress sets to 0 and a finished one to 1.
constexpr const char* kCompleteAttribute = "complete";

/// The chunk shape of a dataset of `rows` rows of `width` values (width 0: a 1-D dataset): about 1 MB a chunk.
std::vector<hsize_t> row_chunk(int64_t rows, int64_t width);

void write_int_dataset(hid_t group, const std::string& name, const std::vector<int64_t>& values, bool gzip);
/// Reads a 1-D integer dataset; one stored as floating-point numbers is refused, naming the row.
std::vector<int64_t> read_int_dataset(hid_t group, const std::string& name, const std::string& where);

void write_attributes(hid_t file, const FileAttributes& attributes);
/// The root attributes, with the defaults of files written before an attribute existed.
FileAttributes load_attributes(hid_t file, const std::string& path);
/// The root attribute of a virtual merge recording each source as it was merged (JSON, one per source).
constexpr const char* kVirtualRecordsAttribute = "virtual_source_records";

/// Refuses a file whose capture was interrupted, and a virtual merge one of whose sources is missing or has changed
/// since the merge (check_virtual_sources).
void check_complete(hid_t file, const std::string& path);

/// For a virtual merge that recorded its sources: refuses one that is missing or no longer what was merged (other
/// rows, labels, example indices, seed, dataset or model), naming it.
void check_virtual_sources(hid_t file, const std::string& path);

}  // namespace probekit::activations::format
