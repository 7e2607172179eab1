#include <fmt/format.h>

#include "common/error.h"
#include "readout/readout.h"

namespace probekit::readout {

std::string non_finite_message(const std::string& what) {
  return fmt::format("{} not finite (NaN or Inf): the checkpoint's weights or its config (a zero scale such as "
                     "query_pre_attn_scalar: 0) produce them",
                     what);
}

void check_finite_rows(const at::Tensor& rows, int64_t layer_dim, const std::vector<int64_t>& layers,
                       const std::string& where) {
  at::Tensor bad = at::logical_not(at::isfinite(rows));
  if (!bad.any().item<bool>()) return;
  at::Tensor per_layer = bad.movedim(layer_dim, 0).reshape({rows.size(layer_dim), -1}).any(1);
  const int64_t index = per_layer.nonzero()[0][0].item<int64_t>();
  const int64_t layer = index < static_cast<int64_t>(layers.size()) ? layers[static_cast<size_t>(index)] : index;
  fail_input("{}{}", where.empty() ? "" : where + ": ",
             non_finite_message(fmt::format("the activations of layer {} are", layer)));
}

}  // namespace probekit::readout
