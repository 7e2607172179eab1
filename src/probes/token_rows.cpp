#include "probes/token_rows.h"

#include <algorithm>

#include "common/error.h"

namespace probekit::probes {

namespace {

// An evaluation chunk's intermediates stay under this many elements.
constexpr int64_t kChunkElements = 16 << 20;

template <typename T>
at::Tensor host_tensor(const std::vector<T>& values, at::ScalarType type) {
  return at::tensor(at::ArrayRef<T>(values), type);
}

}  // namespace

TokenLayout token_layout(const std::vector<int64_t>& offsets, const ProbeShape& shape) {
  TokenLayout layout;
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int64_t begin = offsets[e], end = offsets[e + 1];
    if (end <= begin) fail_input("text {} holds no token row (offsets {} to {})", e, begin, end);
    int64_t first = first_read_row(begin, end, shape.skip_leading);
    if (shape.max_tokens > 0) first = std::max(first, end - shape.max_tokens);
    layout.first.push_back(first);
    layout.length.push_back(end - first);
    layout.position.push_back(first - begin);
  }
  return layout;
}

TokenLayout prefix_layout(const std::vector<int64_t>& offsets, const ProbeShape& shape, std::vector<int64_t>& counts) {
  TokenLayout layout;
  counts.clear();
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int64_t begin = offsets[e], end = offsets[e + 1];
    if (end <= begin) fail_input("text {} holds no token row (offsets {} to {})", e, begin, end);
    const int64_t read_from = first_read_row(begin, end, shape.skip_leading);
    for (int64_t last = read_from; last < end; ++last) {
      const int64_t first = shape.max_tokens > 0 ? std::max(read_from, last + 1 - shape.max_tokens) : read_from;
      layout.first.push_back(first);
      layout.length.push_back(last + 1 - first);
      layout.position.push_back(first - begin);
    }
    counts.push_back(end - read_from);
  }
  return layout;
}

int64_t leading_specials_of(const std::vector<const std::vector<int64_t>*>& token_ids,
                            const std::vector<const std::vector<int64_t>*>& offsets) {
  int64_t first_id = -1;
  for (size_t s = 0; s < offsets.size(); ++s) {
    const std::vector<int64_t>& o = *offsets[s];
    for (size_t e = 0; e + 1 < o.size(); ++e) {
      if (o[e + 1] - o[e] < 2 || static_cast<size_t>(o[e]) >= token_ids[s]->size()) return 0;
      int64_t id = (*token_ids[s])[static_cast<size_t>(o[e])];
      if (first_id >= 0 && id != first_id) return 0;
      first_id = id;
    }
  }
  return first_id >= 0 ? 1 : 0;
}

TokenIndex token_index(const TokenLayout& layout, const int64_t* texts, int64_t count) {
  TokenIndex index;
  index.texts = count;
  for (int64_t b = 0; b < count; ++b) index.longest = std::max(index.longest, layout.length.at(texts[b]));
  for (int64_t b = 0; b < count; ++b) {
    const auto e = static_cast<size_t>(texts[b]);
    for (int64_t t = 0; t < layout.length[e]; ++t) {
      index.rows.push_back(layout.first[e] + t);
      index.text.push_back(b);
      index.slot.push_back(b * index.longest + t);
      index.position.push_back(static_cast<float>(layout.position[e] + t));
    }
  }
  return index;
}

TokenBatch token_batch(const at::Tensor& values, const TokenIndex& index) {
  at::Device device = values.device();
  at::Tensor rows = host_tensor(index.rows, at::kLong).to(device);
  return {values.index_select(0, rows), host_tensor(index.position, at::kFloat).to(device, values.scalar_type()),
          host_tensor(index.text, at::kLong).to(device), host_tensor(index.slot, at::kLong).to(device), index.texts,
          index.longest};
}

at::Tensor padded_by_text(const at::Tensor& values, const TokenBatch& batch, double fill) {
  at::Tensor out = at::full({batch.texts * batch.longest, values.size(1)}, fill, values.options());
  return out.index_copy_(0, batch.row_slot, values).view({batch.texts, batch.longest, values.size(1)});
}

at::Tensor token_logits(const ProbeBank& bank, const at::Tensor& values, const TokenLayout& layout) {
  const int64_t per_row = bank.probes() * bank.shape().kind->evaluation_width(bank.shape());
  std::vector<at::Tensor> parts;
  int64_t start = 0;
  while (start < layout.texts()) {
    int64_t end = start, rows = 0, longest = 0;
    // Padded rows bound the chunk: texts * longest * per_row elements.
    while (end < layout.texts()) {
      const int64_t next_longest = std::max(longest, layout.length[end]);
      if (end > start && (end + 1 - start) * next_longest * per_row > kChunkElements) break;
      longest = next_longest;
      rows += layout.length[end];
      ++end;
    }
    std::vector<int64_t> texts(static_cast<size_t>(end - start));
    for (int64_t e = start; e < end; ++e) texts[e - start] = e;
    TokenBatch batch = token_batch(values, token_index(layout, texts.data(), end - start));
    parts.push_back(bank.shape().kind->forward_tokens(bank, batch).logits);
    start = end;
  }
  if (parts.empty()) return at::empty({0, bank.probes(), bank.shape().outputs}, values.options());
  return at::cat(parts);
}

TokenEpoch::TokenEpoch(const TokenLayout& layout, const std::vector<int64_t>& order, int64_t batch_size,
                       at::Device device, at::ScalarType dtype) {
  TokenIndex all;
  const auto texts = static_cast<int64_t>(order.size());
  for (int64_t first = 0; first < texts; first += batch_size) {
    TokenIndex step = token_index(layout, order.data() + first, std::min(batch_size, texts - first));
    steps_.push_back({static_cast<int64_t>(all.rows.size()), static_cast<int64_t>(step.rows.size()), step.texts,
                      step.longest});
    all.rows.insert(all.rows.end(), step.rows.begin(), step.rows.end());
    all.text.insert(all.text.end(), step.text.begin(), step.text.end());
    all.slot.insert(all.slot.end(), step.slot.begin(), step.slot.end());
    all.position.insert(all.position.end(), step.position.begin(), step.position.end());
  }
  rows_ = host_tensor(all.rows, at::kLong).to(device);
  text_ = host_tensor(all.text, at::kLong).to(device);
  slot_ = host_tensor(all.slot, at::kLong).to(device);
  position_ = host_tensor(all.position, at::kFloat).to(device, dtype);
}

}  // namespace probekit::probes
