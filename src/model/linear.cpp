// A linear layer's weights and their product: dense, or FP8 kept packed.
#include "model/weights.h"

#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/error.h"
#include "device/torch/row_stable.h"
#include "model/quantization.h"

namespace probekit::model {

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
    // The FP8 kernel has no backward: gradients (attribution patching) need the decoded weights' products.
    if (at::GradMode::is_enabled()) fail_input("gradients through FP8 products need --fp8-products decoded");
    at::Tensor product = fp8_block_linear(x, l.fp8.bytes, l.fp8.block_scales);
    return l.bias.defined() ? product.add_(l.bias) : product;
  }
  return device::row_stable_linear(x, l.dense_weight(), l.bias);
}

}  // namespace probekit::model
