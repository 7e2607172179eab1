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
#include "device/torch/row_stable.h"
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

namespace {

// A tensor viewing the bytes of a mapped file; the map is read-only and callers only ever copy from it.
at::Tensor view_tensor(const safetensors::File& file, const safetensors::TensorInfo& info) {
  auto* data = const_cast<uint8_t*>(file.data(info));
  return at::from_blob(data, info.shape, at::TensorOptions().dtype(aten_dtype(info.dtype)));
}

}  // namespace

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
  // Pinned staging pays off from a few megabytes on; small tensors go as they are.
  constexpr int64_t kStagedBytes = int64_t{4} << 20;
  if (device.is_cuda() && static_cast<int64_t>(host.nbytes()) >= kStagedBytes) {
    if (!uploads_) uploads_ = std::make_unique<device::StagedUpload>();
    return uploads_->upload(host, device).to(dtype);
  }
  return host.to(at::TensorOptions().device(device).dtype(dtype), /*non_blocking=*/false, /*copy=*/true);
}

WeightScope::WeightScope(const Checkpoint& checkpoint, std::string prefix, at::Device device, at::ScalarType dtype)
    : checkpoint_(&checkpoint), prefix_(std::move(prefix)), device_(device), dtype_(dtype) {}

WeightScope WeightScope::sub(const std::string& name) const {
  return WeightScope(*checkpoint_, prefix_ + name + ".", device_, dtype_);
}

WeightScope WeightScope::sub(int64_t index) const { return sub(std::to_string(index)); }

WeightScope WeightScope::on(at::Device device) const { return WeightScope(*checkpoint_, prefix_, device, dtype_); }

bool WeightScope::contains(const std::string& name) const { return checkpoint_->find(full_name(name)).has_value(); }

at::Tensor WeightScope::get(const std::string& name, const std::vector<int64_t>& shape) const {
  return get(name, shape, dtype_);
}

Checkpoint::Entry WeightScope::checked_entry(const std::string& name, const std::vector<int64_t>& shape) const {
  std::string full = full_name(name);
  auto entry = checkpoint_->find(full);
  if (!entry) fail("missing weight '{}' in {}", full, checkpoint_->describe_files());
  const safetensors::TensorInfo& info = *entry->info;
  if (info.shape != shape) {
    fail("weight '{}' in {} has shape [{}], expected [{}]", full, entry->file->path(), fmt::join(info.shape, ", "),
         fmt::join(shape, ", "));
  }
  switch (info.dtype) {
    case safetensors::DType::kF32:
    case safetensors::DType::kF16:
    case safetensors::DType::kBF16:
    case safetensors::DType::kF64: break;
    case safetensors::DType::kF8E4M3:
      if (checkpoint_->quantization_.method == "fp8") break;
      fail("weight '{}' in {} is F8_E4M3 but config.json's quantization_config does not say quant_method 'fp8' "
           "with its weight_block_size", full, entry->file->path());
    default:
      fail("weight '{}' in {} has dtype {}, expected a floating-point dtype", full, entry->file->path(),
           safetensors::dtype_name(info.dtype));
  }
  return *entry;
}

at::Tensor WeightScope::fp8_scales(const std::string& name, const Checkpoint::Entry& entry) const {
  const std::string full = full_name(name);
  const std::vector<int64_t>& shape = entry.info->shape;
  const std::vector<int64_t>& block = checkpoint_->quantization_.block;
  if (shape.size() != 2) fail("FP8 weight '{}' in {} must be a matrix", full, entry.file->path());
  const std::string suffix = "weight";
  if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    fail("FP8 tensor '{}' in {} is not a weight that has a weight_scale_inv", full, entry.file->path());
  }
  const std::vector<int64_t> blocks = {(shape[0] + block[0] - 1) / block[0], (shape[1] + block[1] - 1) / block[1]};
  return view(name + "_scale_inv", blocks);
}

at::Tensor WeightScope::dequantized_fp8(const std::string& name, const Checkpoint::Entry& entry) const {
  return dequantize_fp8_blocks(view_tensor(*entry.file, *entry.info), fp8_scales(name, entry),
                               checkpoint_->quantization_.block);
}

Fp8Weight WeightScope::packed_fp8(const std::string& name, const Checkpoint::Entry& entry) const {
  // One scale row per weight row: the projections stacked into one (q, k and v) then stack their scales too,
  // whatever their sizes against the block. A thirty-second of the bytes with 128-wide blocks.
  const at::Tensor scale_inv = fp8_scales(name, entry);
  at::Tensor row_scales = fp8_row_scales(scale_inv, entry.info->shape[0], checkpoint_->quantization_.block[0]);
  at::Tensor bytes = view_tensor(*entry.file, *entry.info);  // uint8
  checkpoint_->loaded_bytes_ += static_cast<int64_t>(bytes.nbytes() + row_scales.nbytes());
  Fp8Weight weight{checkpoint_->load(bytes, device_, at::kByte), checkpoint_->load(row_scales, device_, at::kFloat),
                   checkpoint_->quantization_.block[1], dtype_};
  if (fp8_block_products(entry.info->shape[0], entry.info->shape[1])) {
    weight.block_scales = checkpoint_->load(scale_inv, device_, at::kFloat);
    checkpoint_->loaded_bytes_ += static_cast<int64_t>(weight.block_scales.nbytes());
  }
  return weight;
}

bool WeightScope::fp8_block_products(int64_t out, int64_t in) const {
  // TransformerModel::load refused the request where the products cannot run; weights the products do not take
  // (other blocks, other widths) decode for each product whatever was asked.
  return checkpoint_->fp8_block_products_ && checkpoint_->quantization_.block == std::vector<int64_t>{128, 128} &&
         fp8_block_products_take(out, in);
}

Linear WeightScope::get_linear(const std::vector<std::pair<std::string, int64_t>>& parts, int64_t in, bool bias) const {
  std::vector<Checkpoint::Entry> entries;
  bool all_fp8 = true;
  for (const auto& [name, out] : parts) {
    entries.push_back(checked_entry(name + ".weight", {out, in}));
    all_fp8 = all_fp8 && entries.back().info->dtype == safetensors::DType::kF8E4M3;
  }
  const bool packed = all_fp8 && checkpoint_->keep_fp8_packed_.value_or(device_.is_cuda());
  std::vector<Linear> weights(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string name = parts[i].first + ".weight";
    if (packed) {
      weights[i].fp8 = packed_fp8(name, entries[i]);
    } else {
      weights[i].weight = get(name, {parts[i].second, in});
    }
  }
  Linear linear = stacked(weights);
  if (bias) {
    std::vector<at::Tensor> biases;
    for (const auto& [name, out] : parts) biases.push_back(get(name + ".bias", {out}));
    linear.bias = biases.size() == 1 ? biases[0] : at::cat(biases);
  }
  return linear;
}

at::Tensor WeightScope::get(const std::string& name, const std::vector<int64_t>& shape, at::ScalarType dtype) const {
  Checkpoint::Entry entry = checked_entry(name, shape);
  at::Tensor stored = entry.info->dtype == safetensors::DType::kF8E4M3 ? dequantized_fp8(name, entry)
                                                                       : view_tensor(*entry.file, *entry.info);
  checkpoint_->loaded_bytes_ += static_cast<int64_t>(entry.info->numel()) * static_cast<int64_t>(c10::elementSize(dtype));
  return checkpoint_->load(stored, device_, dtype);
}

at::Tensor Linear::dense_weight() const {
  return fp8.defined() ? decode_fp8_rows(fp8.bytes, fp8.row_scales, fp8.block_in, fp8.dtype) : weight;
}

Linear rows_selected(const Linear& l, const at::Tensor& order) {
  Linear selected;
  if (l.bias.defined()) selected.bias = l.bias.index_select(0, order.to(l.bias.device()));
  if (!l.fp8.defined()) {
    selected.weight = l.weight.index_select(0, order.to(l.weight.device()));
    return selected;
  }
  const at::Tensor rows = order.to(l.fp8.bytes.device());
  selected.fp8 = l.fp8;
  selected.fp8.bytes = l.fp8.bytes.index_select(0, rows);
  selected.fp8.row_scales = l.fp8.row_scales.index_select(0, rows);
  selected.fp8.block_scales = at::Tensor();
  // Each 128 rows selected from one block of 128 take that block's scales.
  if (l.fp8.block_scales.defined() && rows.size(0) % 128 == 0) {
    const at::Tensor source = rows.div(128, "floor").view({-1, 128}), first = source.select(1, 0);
    if (at::equal(source, first.unsqueeze(1).expand_as(source))) {
      selected.fp8.block_scales = l.fp8.block_scales.index_select(0, first);
    }
  }
  return selected;
}

Linear stacked(const std::vector<Linear>& parts) {
  if (parts.size() == 1) return {parts.front().weight, at::Tensor(), parts.front().fp8};
  bool all_packed = true, all_block_scaled = true;
  for (const Linear& part : parts) {
    all_packed = all_packed && part.fp8.defined();
    all_block_scaled = all_block_scaled && part.fp8.block_scales.defined();
  }
  std::vector<at::Tensor> weights, bytes, row_scales, block_scales;
  for (const Linear& part : parts) {
    if (!all_packed) {
      weights.push_back(part.dense_weight());
      continue;
    }
    bytes.push_back(part.fp8.bytes), row_scales.push_back(part.fp8.row_scales);
    if (all_block_scaled) block_scales.push_back(part.fp8.block_scales);
  }
  Linear whole;
  if (!all_packed) {
    whole.weight = at::cat(weights);
    return whole;
  }
  whole.fp8 = parts.front().fp8;
  whole.fp8.bytes = at::cat(bytes), whole.fp8.row_scales = at::cat(row_scales);
  whole.fp8.block_scales = all_block_scaled ? at::cat(block_scales) : at::Tensor();
  return whole;
}

at::Tensor linear(const at::Tensor& x, const Linear& l) {
  if (l.fp8.block_scales.defined() && x.is_cuda()) {
    at::Tensor product = fp8_block_linear(x, l.fp8.bytes, l.fp8.block_scales);
    return l.bias.defined() ? product.add_(l.bias) : product;
  }
  return device::row_stable_linear(x, l.dense_weight(), l.bias);
}

at::Tensor WeightScope::mxfp4_part(const std::string& name, const std::vector<int64_t>& shape) const {
  const std::string full = full_name(name);
  auto entry = checkpoint_->find(full);
  if (!entry) fail("missing weight '{}' in {}", full, checkpoint_->describe_files());
  const safetensors::TensorInfo& info = *entry->info;
  if (checkpoint_->quantization_.method != "mxfp4") {
    fail("weight '{}' in {} is part of an MXFP4 weight but config.json's quantization_config does not say "
         "quant_method 'mxfp4'", full, entry->file->path());
  }
  if (info.dtype != safetensors::DType::kU8) {
    fail("MXFP4 tensor '{}' in {} has dtype {}, expected U8", full, entry->file->path(), safetensors::dtype_name(info.dtype));
  }
  if (info.shape != shape) {
    fail("weight '{}' in {} has shape [{}], expected [{}]", full, entry->file->path(), fmt::join(info.shape, ", "),
         fmt::join(shape, ", "));
  }
  return view_tensor(*entry->file, info);
}

Mxfp4Weight WeightScope::mxfp4_parts(const std::string& name, const std::vector<int64_t>& shape) const {
  if (shape.size() < 2 || shape.back() % 32 != 0) {
    fail("MXFP4 weight '{}': its input size {} is not a multiple of 32", full_name(name), shape.empty() ? 0 : shape.back());
  }
  std::vector<int64_t> scales_shape(shape.begin(), shape.end() - 1);
  scales_shape.push_back(shape.back() / 32);
  std::vector<int64_t> blocks_shape = scales_shape;
  blocks_shape.push_back(16);
  Mxfp4Weight parts{mxfp4_part(name + "_blocks", blocks_shape), mxfp4_part(name + "_scales", scales_shape)};
  check_mxfp4(parts.blocks, parts.scales, fmt::format("weight '{}' in {}", full_name(name), checkpoint_->describe_files()));
  return parts;
}

at::Tensor WeightScope::get_mxfp4(const std::string& name, const std::vector<int64_t>& shape) const {
  const Mxfp4Weight parts = mxfp4_parts(name, shape);
  // Decoded one slice of the leading dimension (one expert) at a time: the decoder's temporaries stay that small.
  at::Tensor values = at::empty(shape, at::kFloat);
  for (int64_t i = 0; i < shape[0]; ++i) values[i].copy_(decode_mxfp4(parts.blocks[i], parts.scales[i], at::kFloat));
  checkpoint_->loaded_bytes_ += values.numel() * static_cast<int64_t>(c10::elementSize(dtype_));
  return checkpoint_->load(values, device_, dtype_);
}

Mxfp4Weight WeightScope::get_mxfp4_packed(const std::string& name, const std::vector<int64_t>& shape) const {
  const Mxfp4Weight parts = mxfp4_parts(name, shape);
  checkpoint_->loaded_bytes_ += static_cast<int64_t>(parts.blocks.nbytes() + parts.scales.nbytes());
  return {checkpoint_->load(parts.blocks, device_, at::kByte), checkpoint_->load(parts.scales, device_, at::kByte)};
}

at::Tensor WeightScope::view(const std::string& name, const std::vector<int64_t>& shape) const {
  Checkpoint::Entry entry = checked_entry(name, shape);
  if (entry.info->dtype == safetensors::DType::kF8E4M3) {
    fail("weight '{}' in {} is FP8, which is decoded on load, not viewed in place", full_name(name), entry.file->path());
  }
  return view_tensor(*entry.file, *entry.info);
}

std::optional<at::Tensor> WeightScope::get_optional(const std::string& name, const std::vector<int64_t>& shape) const {
  if (!contains(name)) return std::nullopt;
  return get(name, shape);
}

}  // namespace probekit::model
