// Attention on the CPU in fp32 whose every output is one fixed function of its query and of the keys and values it
// may see. Masked slots are skipped, never summed as zeros: OpenBLAS's products and ATen's softmax sum a row's slots
// in an order that depends on how many there are and on the CPU's kernel, so a stream's numbers changed with the
// padding of its batch or the cache's visible length on some CPUs. Here neither padding, nor the visible length, nor
// the rows beside a query change a bit of its output.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace probekit::model {

/// Whether fixed_order_attention takes these: fp32 on the CPU, no gradient asked for.
bool fixed_order_attention_takes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

/// softmax(q k^T scale (soft-capped), masked) v for q [B, heads, T, D], k [B, kv_heads, S, D], v [B, kv_heads, S, Dv]
/// (query head h reads kv head h / (heads / kv_heads)); `allowed` bool, broadcastable to [B, heads, T, S], or undefined
/// for causal (query t sees slots up to t); `sinks` [heads] or undefined: each head's logit joins the denominator.
/// Each query's slots in increasing order: the scores (row_stable's fixed-order products), their maximum, the
/// exponentials' sum, then the weighted values; a query that may see nothing gives zeros. Returns [B, heads, T, Dv].
at::Tensor fixed_order_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& allowed,
                                 double scale, const std::optional<double>& softcap, const at::Tensor& sinks);

}  // namespace probekit::model
