#include "readout/pooling.h"

#include <limits>

namespace probekit::readout {

namespace {
// [B, T, 1] mask of the tokens at positions [first, length) of each row.
at::Tensor token_mask(const at::Tensor& hidden, const at::Tensor& lengths, int64_t first) {
  at::Tensor positions = at::arange(hidden.size(1), lengths.options()).unsqueeze(0);
  at::Tensor start = at::clamp_max(at::full_like(lengths, first), lengths - 1).unsqueeze(1);
  return ((positions < lengths.unsqueeze(1)) & (positions >= start)).unsqueeze(-1);
}
}  // namespace

at::Tensor pool(const at::Tensor& hidden, const at::Tensor& lengths, Position position, int64_t skip_leading) {
  const int64_t batch = hidden.size(0), tokens = hidden.size(1), width = hidden.size(2);
  if (position == Position::kLast) {
    at::Tensor rows = at::arange(batch, lengths.options()) * tokens + (lengths - 1);
    return hidden.reshape({batch * tokens, width}).index_select(0, rows).to(at::kFloat);
  }
  at::Tensor mask = token_mask(hidden, lengths, skip_leading);
  at::Tensor values = hidden.to(at::kFloat);
  if (position == Position::kMean) {
    return (values * mask).sum(1) / mask.sum(1).to(at::kFloat);
  }
  return values.masked_fill(mask.logical_not(), -std::numeric_limits<float>::infinity()).amax(1);
}

at::Tensor real_token_rows(const at::Tensor& hidden, const at::Tensor& lengths) {
  const int64_t batch = hidden.size(0), tokens = hidden.size(1);
  at::Tensor mask = at::arange(tokens, lengths.options()).unsqueeze(0) < lengths.unsqueeze(1);  // [B, T]
  at::Tensor rows = at::arange(batch * tokens, lengths.options()).masked_select(mask.reshape({-1}));
  return hidden.reshape({batch * tokens, hidden.size(2)}).index_select(0, rows).to(at::kFloat);
}

}  // namespace probekit::readout
