#include "sites/sites.h"

#include "common/error.h"

namespace probekit {

const std::vector<SiteRow>& site_table() {
  static const std::vector<SiteRow> table = {
      {Site::kEmbeddings, "embeddings", SiteWidth::kHidden, kPoolable | kWritable | kScorable,
       "the input of the first decoder layer (after the embedding scale and learned positions)"},
      {Site::kResidPre, "resid_pre", SiteWidth::kHidden, kReadable | kPoolable | kScorable,
       "the residual stream entering the layer"},
      {Site::kAttnOut, "attn_out", SiteWidth::kHidden, kReadable | kPoolable | kWritable | kScorable,
       "the attention branch's output (after its post-norm, where the family has one)"},
      {Site::kResidMid, "resid_mid", SiteWidth::kHidden, kReadable | kPoolable | kScorable,
       "the residual stream between the attention and the MLP branches"},
      {Site::kLn2Normalized, "ln2_normalized", SiteWidth::kHidden, kReadable | kPoolable | kScorable,
       "the pre-MLP norm's output before its weight and bias (TransformerLens' ln2.hook_normalized, what its "
       "transcoders read)"},
      {Site::kMlpIn, "mlp_in", SiteWidth::kHidden, kReadable | kPoolable | kScorable,
       "the MLP branch's input: the residual between the branches through the pre-MLP norm (what Gemma Scope 2's and "
       "sparsify's transcoders read)"},
      {Site::kMlpOut, "mlp_out", SiteWidth::kHidden, kReadable | kPoolable | kWritable | kScorable,
       "the MLP (or routed experts) branch's output (after its post-norm, where the family has one)"},
      {Site::kResidPost, "resid_post", SiteWidth::kHidden, kReadable | kPoolable | kWritable | kScorable,
       "the layer's output: the residual stream after the layer, what a hook on model.layers[l] returns"},
      {Site::kFinalNorm, "final_norm", SiteWidth::kHidden, kPoolable | kScorable,
       "the last layer's output after the model's final norm"},
      {Site::kRouter, "router", SiteWidth::kExperts, kReadable | kRouted | kPoolable | kScorable,
       "the router's logits before the softmax, one per expert"},
      {Site::kExperts, "experts", SiteWidth::kTwiceTopK, kReadable | kRouted,
       "the k experts the router chose (ids, most probable first) and their weights"},
  };
  return table;
}

const SiteRow& site_row(Site site) { return site_table().at(static_cast<size_t>(site)); }

const char* site_name(Site site) { return site_row(site).name; }

std::optional<Site> find_site(const std::string& name) {
  for (const SiteRow& row : site_table()) {
    if (name == row.name) return row.site;
  }
  return std::nullopt;
}

std::string site_names(bool writable) {
  std::string names;
  for (const SiteRow& row : site_table()) {
    if (!(writable ? row.writable() : row.readable())) continue;
    names += (names.empty() ? "" : ", ") + std::string(row.name);
  }
  return names;
}

Site parse_site(const std::string& name) {
  std::optional<Site> site = find_site(name);
  if (!site || !site_row(*site).readable()) fail_usage("--site {}: expected one of {}", name, site_names());
  return *site;
}

}  // namespace probekit
