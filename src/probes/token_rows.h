// The token rows an every-token probe (attention) reads of each text of a --position all capture, and the batches
// of them it trains and evaluates on: rows stay packed, text after text, as the file stores them; a batch is the
// rows of some texts gathered by index, with each row's position in its text and its slot in a padded
// [texts, longest] layout (probe_kind.h's TokenBatch).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "probes/probe_bank.h"

namespace probekit::probes {

/// Text e reads rows [first[e], first[e] + length[e]) of its split, the first of them at index position[e] of
/// the text: its rows after the leading special tokens, at most the last max_tokens of them.
struct TokenLayout {
  std::vector<int64_t> first, length, position;
  int64_t texts() const { return static_cast<int64_t>(first.size()); }
};

/// The first row read of the text of rows [begin, end): the one after its `skip` leading specials, or its last row
/// when it holds nothing else (a text of special tokens only is read as it is).
inline int64_t first_read_row(int64_t begin, int64_t end, int64_t skip) { return std::min(begin + skip, end - 1); }

/// The layout of texts at `offsets` ([texts + 1] row offsets) for a probe of `shape` (its skip_leading and
/// max_tokens). A text keeps at least its last row (a text of special tokens only is read as it is).
TokenLayout token_layout(const std::vector<int64_t>& offsets, const ProbeShape& shape);

/// The prefixes of the texts at `offsets` as a probe of `shape` reads them: for each text, one entry per row from its
/// first read row (after the leading specials; a text of specials only, its last row) to its end, that row the
/// prefix's last, the rows before it read as token_layout reads a text cut there. Text after text; `counts` gets
/// each text's number of prefixes.
TokenLayout prefix_layout(const std::vector<int64_t>& offsets, const ProbeShape& shape, std::vector<int64_t>& counts);

/// How many leading special tokens a --position all file's texts start with: 1 when every text of every split
/// starts with the same token id (a BOS) and holds more than one token, else 0.
int64_t leading_specials_of(const std::vector<const std::vector<int64_t>*>& token_ids,
                            const std::vector<const std::vector<int64_t>*>& offsets);

/// The indices of one batch of texts on the host, to be sent to the device.
struct TokenIndex {
  std::vector<int64_t> rows, text, slot;
  std::vector<float> position;
  int64_t texts = 0, longest = 0;
};

/// The rows of texts `texts` (indices into the layout), in that order.
TokenIndex token_index(const TokenLayout& layout, const int64_t* texts, int64_t count);

/// The batch of `index`'s texts, its rows taken from `values` [rows, H] (on `values`' device, in its dtype).
TokenBatch token_batch(const at::Tensor& values, const TokenIndex& index);

/// `values` [R, n] of a batch's rows scattered into a padded [B, longest, n] of `fill` by the batch's row slots.
at::Tensor padded_by_text(const at::Tensor& values, const TokenBatch& batch, double fill);

/// Eval logits [texts, K, O] of every text of `layout`, rows from `values`, in chunks of texts that bound the
/// intermediates' size.
at::Tensor token_logits(const ProbeBank& bank, const at::Tensor& values, const TokenLayout& layout);

/// One epoch's training batches of texts in `order` (host indices into the layout), `batch_size` texts each: the
/// indices of every batch are made once and sent to the device at construction, so a step needs no transfer.
class TokenEpoch {
 public:
  TokenEpoch(const TokenLayout& layout, const std::vector<int64_t>& order, int64_t batch_size, at::Device device,
             at::ScalarType dtype);

  /// Batch `step`, its rows gathered by `gather` ([R] int64 row indices on the device -> [R, H]).
  template <typename Gather>
  TokenBatch batch(int64_t step, Gather gather) const {
    const Step& s = steps_.at(static_cast<size_t>(step));
    at::Tensor rows = rows_.narrow(0, s.first, s.count);
    return {gather(rows), position_.narrow(0, s.first, s.count), text_.narrow(0, s.first, s.count),
            slot_.narrow(0, s.first, s.count), s.texts, s.longest};
  }

 private:
  struct Step {
    int64_t first = 0, count = 0, texts = 0, longest = 0;
  };
  std::vector<Step> steps_;
  at::Tensor rows_, position_, text_, slot_;
};

}  // namespace probekit::probes
