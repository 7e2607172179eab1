#include "model/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/sha256.h"
#include "model/quantization.h"

namespace probekit::model {

at::ScalarType aten_dtype(safetensors::DType dtype) {
  using safetensors::DType;
  switch (dtype) {
    case DType::kF64: return at::kDouble;
    case DType::kF32: return at::kFloat;
    case DType::kF16: return at::kHalf;
    case DType::kBF16: return at::kBFloat16;
    case DType::kF8E4M3: return at::kByte;  // LibTorch 1.13 has no float8: the raw bytes, decoded on load
    case DType::kI64: return at::kLong;
    case DType::kI32: return at::kInt;
    case DType::kI16: return at::kShort;
    case DType::kI8: return at::kChar;
    case DType::kU8: return at::kByte;
    case DType::kBool: return at::kBool;
  }
  return at::kFloat;
}

Checkpoint Checkpoint::open(const std::string& dir, Quantization quantization, std::optional<bool> keep_fp8_packed,
                            bool fp8_block_products) {
  Checkpoint checkpoint;
  checkpoint.dir_ = dir;
  checkpoint.quantization_ = std::move(quantization);
  checkpoint.keep_fp8_packed_ = keep_fp8_packed;
  checkpoint.fp8_block_products_ = fp8_block_products;
  std::string single = dir + "/model.safetensors";
  std::string index_path = dir + "/model.safetensors.index.json";
  // Anything at the name is opened, so a directory or a FIFO there is named as such rather than missing.
  if (path_exists(single)) {
    checkpoint.files_.push_back(std::make_unique<safetensors::File>(single));
    for (const auto& info : checkpoint.files_[0]->tensors()) {
      checkpoint.index_[info.name] = Entry{checkpoint.files_[0].get(), &info};
    }
    return checkpoint;
  }
  if (!path_exists(index_path)) {
    fail("{}: no model.safetensors or model.safetensors.index.json (only safetensors checkpoints are supported)", dir);
  }
  Json index = read_json_file(index_path);
  auto weight_map = index.find("weight_map");
  if (weight_map == index.end() || !weight_map->is_object()) fail("{}: no 'weight_map' object", index_path);
  std::map<std::string, safetensors::File*> shards;
  for (auto it = weight_map->begin(); it != weight_map->end(); ++it) {
    if (!it->is_string()) fail("{}: weight_map['{}'] must be a file name", index_path, it.key());
    std::string shard = it->get<std::string>();
    if (shard.find('/') != std::string::npos) fail("{}: shard name '{}' must be a plain file name", index_path, shard);
    if (!shards.count(shard)) {
      std::string shard_path = dir + "/" + shard;
      if (!path_exists(shard_path)) fail("{}: shard {} listed in the index is missing", index_path, shard_path);
      checkpoint.files_.push_back(std::make_unique<safetensors::File>(shard_path));
      shards[shard] = checkpoint.files_.back().get();
    }
    const safetensors::File* file = shards[shard];
    const safetensors::TensorInfo* info = file->find(it.key());
    if (info == nullptr) fail("{}: tensor '{}' is listed in {} but that shard does not hold it", index_path, it.key(), shard);
    checkpoint.index_[it.key()] = Entry{file, info};
  }
  return checkpoint;
}

std::optional<Checkpoint::Entry> Checkpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

std::string Checkpoint::describe_files() const {
  std::vector<std::string> paths;
  for (const auto& file : files_) paths.push_back(file->path());
  return paths.size() == 1 ? paths[0] : fmt::format("any of {}", fmt::join(paths, ", "));
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : index_) out.push_back(name);
  return out;
}

int64_t Checkpoint::parameter_count() const {
  int64_t total = 0;
  for (const auto& [name, entry] : index_) total += entry.info->numel();
  return total;
}

std::string Checkpoint::dominant_dtype() const {
  std::map<std::string, int64_t> by_dtype;
  for (const auto& [name, entry] : index_) by_dtype[safetensors::dtype_name(entry.info->dtype)] += entry.info->numel();
  auto best = std::max_element(by_dtype.begin(), by_dtype.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
  return best == by_dtype.end() ? "" : best->first;
}

std::string Checkpoint::fingerprint() const {
  Sha256 hash;
  hash.update(read_file(dir_ + "/config.json"));
  std::vector<const safetensors::File*> files;
  for (const auto& file : files_) files.push_back(file.get());
  std::sort(files.begin(), files.end(), [](auto* a, auto* b) { return a->path() < b->path(); });
  for (const safetensors::File* file : files) {
    hash.update(file->path().substr(file->path().rfind('/') + 1));
    if (file->tensors().empty()) continue;
    // Tensors are in data order: the first one's data starts right after the header.
    const safetensors::TensorInfo& first = file->tensors().front();
    const auto* start = reinterpret_cast<const char*>(file->data(first)) - first.data_begin;
    hash.update(std::string_view(start, first.data_begin));
  }
  return hash.hex_digest();
}

std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> Checkpoint::byte_ranges(
    const std::function<bool(const std::string&, const safetensors::TensorInfo&)>& wanted) const {
  std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> by_file;
  for (const auto& [name, entry] : index_) {
    if (wanted(name, *entry.info)) by_file[entry.file->path()].emplace_back(entry.info->data_begin, entry.info->data_end);
  }
  std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> ranges;
  for (auto& [path, spans] : by_file) {
    std::sort(spans.begin(), spans.end());
    for (const auto& span : spans) {
      if (!ranges.empty() && ranges.back().first == path && ranges.back().second.second >= span.first) {
        ranges.back().second.second = std::max(ranges.back().second.second, span.second);
      } else {
        ranges.push_back({path, span});
      }
    }
  }
  return ranges;
}

Prefetcher::Prefetcher(std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> ranges, int threads)
    : stop_(std::make_shared<std::atomic<bool>>(false)) {
  constexpr uint64_t kChunk = 16ull << 20;
  // Chunks are handed out round-robin in file order, so the reads run just ahead of the loader.
  auto chunks = std::make_shared<std::vector<std::pair<size_t, std::pair<uint64_t, uint64_t>>>>();
  for (size_t r = 0; r < ranges.size(); ++r) {
    for (uint64_t at = ranges[r].second.first; at < ranges[r].second.second; at += kChunk) {
      chunks->push_back({r, {at, std::min(ranges[r].second.second, at + kChunk)}});
    }
  }
  auto shared_ranges = std::make_shared<decltype(ranges)>(std::move(ranges));
  for (int t = 0; t < threads; ++t) {
    threads_.emplace_back([chunks, shared_ranges, t, threads, stop = stop_] {
      std::vector<char> buffer(kChunk);
      std::map<size_t, int> descriptors;
      for (size_t c = static_cast<size_t>(t); c < chunks->size() && !*stop; c += static_cast<size_t>(threads)) {
        const auto& [range, span] = (*chunks)[c];
        auto open = descriptors.find(range);
        if (open == descriptors.end()) open = descriptors.emplace(range, ::open((*shared_ranges)[range].first.c_str(), O_RDONLY | O_CLOEXEC)).first;
        if (open->second < 0) continue;  // the loader reports unreadable files itself
        // A warm start's chunks are in the page cache already: reading them again would only copy them, taking
        // memory bandwidth from the upload running beside.
        if (in_page_cache(open->second, span.first, span.second)) continue;
        for (uint64_t at = span.first; at < span.second;) {
          ssize_t got = ::pread(open->second, buffer.data(), span.second - at, static_cast<off_t>(at));
          if (got <= 0) break;
          at += static_cast<uint64_t>(got);
        }
      }
      for (const auto& [range, fd] : descriptors) {
        if (fd >= 0) ::close(fd);
      }
    });
  }
}

Prefetcher::~Prefetcher() {
  // Whatever is not read yet is no longer needed: the loader has finished, or failed.
  *stop_ = true;
  for (std::thread& thread : threads_) thread.join();
}

at::Tensor Checkpoint::load(const at::Tensor& host, at::Device device, at::ScalarType dtype) const {
  // Pinned staging pays off from a few megabytes on. Smaller tensors go through a pinned copy of their own: a plain
  // copy from pageable memory would wait for every copy queued before it, stalling the staged pipeline.
  constexpr int64_t kStagedBytes = int64_t{4} << 20;
  if (device.is_cuda() && static_cast<int64_t>(host.nbytes()) >= kStagedBytes) {
    if (!uploads_) uploads_ = std::make_unique<device::StagedUpload>();
    // A view of a file's map is read from the file: StagedUpload::upload_from_file says why.
    for (const auto& file : files_) {
      if (const std::optional<uint64_t> offset = file->offset_of(host.data_ptr(), host.nbytes())) {
        return uploads_->upload_from_file(file->path(), *offset, host, device).to(dtype);
      }
    }
    return uploads_->upload(host, device).to(dtype);
  }
  if (device.is_cuda()) return device::to_device(host, device).to(dtype);
  return host.to(at::TensorOptions().device(device).dtype(dtype), /*non_blocking=*/false, /*copy=*/true);
}

WeightScope::WeightScope(const Checkpoint& checkpoint, std::string prefix, at::Device device, at::ScalarType dtype)
    : checkpoint_(&checkpoint), prefix_(std::move(prefix)), device_(device), dtype_(dtype) {}

}  // namespace probekit::model
