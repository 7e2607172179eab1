#include "probes/solvers/row_block_products.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <utility>

namespace probekit::probes::solvers {

RowBlockProducts::RowBlockProducts(at::Tensor inputs) : inputs_(std::move(inputs)) {
  const int64_t rows = inputs_.size(0);
  const int64_t count = inputs_.is_cpu() ? std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows)) : 1;
  for (int64_t b = 0; b < count; ++b) {
    int64_t start = rows * b / count, end = rows * (b + 1) / count;
    blocks_.push_back({start, end - start});
  }
}

at::Tensor RowBlockProducts::times_rows(const at::Tensor& weights) const {
  at::Tensor w = weights.to(inputs_.scalar_type());
  if (blocks_.size() == 1) return at::mm(w, inputs_.t());
  std::vector<at::Tensor> parts(blocks_.size());
  // Inside the parallel region each product runs on its thread alone.
  at::parallel_for(0, static_cast<int64_t>(blocks_.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      parts[b] = at::mm(w, inputs_.narrow(0, blocks_[b].start, blocks_[b].length).t());
    }
  });
  return at::cat(parts, 1);
}

at::Tensor RowBlockProducts::over_rows(const at::Tensor& per_row) const {
  at::Tensor d = per_row.to(inputs_.scalar_type());
  if (blocks_.size() == 1) return at::mm(d, inputs_);
  std::vector<at::Tensor> parts(blocks_.size());
  at::parallel_for(0, static_cast<int64_t>(blocks_.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const Block& block = blocks_[b];
      parts[b] = at::mm(d.narrow(1, block.start, block.length), inputs_.narrow(0, block.start, block.length));
    }
  });
  at::Tensor sum = parts[0];
  for (size_t b = 1; b < parts.size(); ++b) sum.add_(parts[b]);
  return sum;
}

}  // namespace probekit::probes::solvers
