// WeightScope: a checkpoint's weights by name, checked and decoded (FP8, MXFP4) as they are read.
#include "model/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/error.h"
#include "model/quantization.h"

namespace probekit::model {

namespace {

// A tensor viewing the bytes of a mapped file; the map is read-only and callers only ever copy from it.
at::Tensor view_tensor(const safetensors::File& file, const safetensors::TensorInfo& info) {
  auto* data = const_cast<uint8_t*>(file.data(info));
  return at::from_blob(data, info.shape, at::TensorOptions().dtype(aten_dtype(info.dtype)));
}

}  // namespace

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
  at::Tensor scales = view(name + "_scale_inv", blocks);
  check_fp8_scales(scales, fmt::format("'{}_scale_inv' in {}", full, entry.file->path()));
  return scales;
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
