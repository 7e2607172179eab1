// The decoder block's routed-experts feed-forward (Mixtral, Qwen MoE, gpt-oss, DeepSeek V3): a router scores every
// expert for each token, the top k are taken with their softmax probabilities as weights (gpt-oss: a softmax over
// the k chosen logits alone; DeepSeek V3: sigmoid scores chosen by group, see RouterScoring), and each expert runs
// once over the tokens routed to it. On a Hopper-class GPU in bf16 one grouped GEMM (at::_grouped_mm, LibTorch 2.8
// and later) serves every expert with the group offsets read on the device, so no layer waits for the host;
// elsewhere a loop over the experts does the same products on each expert's slice of the sorted tokens.
#pragma once

#include <ATen/ATen.h>

#include "model/config.h"
#include "model/weights.h"

namespace probekit::model {

/// How one layer routes N tokens.
struct Routing {
  at::Tensor logits;   // [N, experts] fp32: the router's logits (its bias included), before the softmax (sigmoid)
  at::Tensor experts;  // [N, k] int64: the chosen experts, most probable first
  at::Tensor weights;  // [N, k] fp32: their probabilities (renormalised over the k with normalize_top_k, scaled)
};

/// The routing of tokens x [N, hidden] (compute dtype): the router's product in the router's dtype, the softmax
/// (sigmoid) and the choice in fp32, in the order RoutedExpertsSpec::scoring says.
Routing route_tokens(const at::Tensor& x, const RoutedExperts& weights, const RoutedExpertsSpec& spec);

/// The feed-forward's output [N, hidden] in fp32 for tokens x [N, hidden] (compute dtype): the sum of the chosen
/// experts' outputs weighted by the routing, plus the shared expert (gated where it has a gate) where there is one.
at::Tensor run_routed_experts(const at::Tensor& x, const Routing& routing, const RoutedExperts& weights,
                              const ModelConfig& config);

}  // namespace probekit::model
