#include "readout/pooling.h"

#include <algorithm>
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

at::Tensor read_tokens(const std::vector<std::vector<uint8_t>>& masks, int64_t longest, at::Device device) {
  at::Tensor read = at::zeros({static_cast<int64_t>(masks.size()), longest}, at::kBool);
  auto* data = read.data_ptr<bool>();
  for (size_t b = 0; b < masks.size(); ++b) {
    const size_t used = std::min(masks[b].size(), static_cast<size_t>(longest));
    for (size_t t = 0; t < used; ++t) data[b * static_cast<size_t>(longest) + t] = masks[b][t] != 0;
  }
  return read.to(device);
}

at::Tensor pool_read(const at::Tensor& hidden, const at::Tensor& read, Position position) {
  const int64_t batch = hidden.size(0), tokens = hidden.size(1), width = hidden.size(2);
  if (position == Position::kLast) {
    // The last read token: the largest position + 1 among read tokens, less one.
    at::Tensor positions = at::arange(1, tokens + 1, read.options().dtype(at::kLong)).unsqueeze(0);
    at::Tensor last = (positions * read.to(at::kLong)).amax(1) - 1;
    at::Tensor rows = at::arange(batch, last.options()) * tokens + last;
    return hidden.reshape({batch * tokens, width}).index_select(0, rows).to(at::kFloat);
  }
  at::Tensor mask = read.unsqueeze(-1);
  at::Tensor values = hidden.to(at::kFloat);
  if (position == Position::kMean) return (values * mask).sum(1) / mask.sum(1).to(at::kFloat);
  return values.masked_fill(mask.logical_not(), -std::numeric_limits<float>::infinity()).amax(1);
}

at::Tensor read_token_rows(const at::Tensor& hidden, const at::Tensor& read) {
  const int64_t batch = hidden.size(0), tokens = hidden.size(1);
  at::Tensor rows = at::arange(batch * tokens, read.options().dtype(at::kLong)).masked_select(read.reshape({-1}));
  return hidden.reshape({batch * tokens, hidden.size(2)}).index_select(0, rows).to(at::kFloat);
}

}  // namespace probekit::readout
