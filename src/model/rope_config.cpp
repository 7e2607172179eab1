// The rope readers the families share: a rope_scaling / rope_parameters object (either layout) turned into a
// RopeSpec, one rope for every layer or one per layer type, and the fraction of each head that rotates.
#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "common/error.h"
#include "model/families.h"

namespace probekit::model {

namespace {

// The rope object's number keys, each read into the RawRope field of its name.
constexpr std::pair<const char*, Field<double> RawRope::*> kNumberKeys[] = {
    {"rope_theta", &RawRope::rope_theta}, {"factor", &RawRope::factor},
    {"low_freq_factor", &RawRope::low_freq_factor}, {"high_freq_factor", &RawRope::high_freq_factor},
    {"partial_rotary_factor", &RawRope::partial_rotary_factor}, {"attention_factor", &RawRope::attention_factor},
    {"beta_fast", &RawRope::beta_fast}, {"beta_slow", &RawRope::beta_slow}, {"mscale", &RawRope::mscale},
    {"mscale_all_dim", &RawRope::mscale_all_dim}};

}  // namespace

Field<RawRope> read_rope(const ConfigReader& config_json, const char* key) {
  Field<ConfigReader> object = config_json.read<ConfigReader>(key);
  Field<RawRope> rope;
  rope.present = object.present;
  if (!object.value) return rope;
  const ConfigReader& keys = *object.value;
  RawRope& raw = rope.value.emplace();
  raw.rope_type = keys.read<std::string>("rope_type");
  if (!raw.rope_type.value) raw.rope_type = keys.read<std::string>("type");
  for (const auto& [name, field] : kNumberKeys) raw.*field = keys.read<double>(name);
  raw.original_max_position_embeddings = keys.read<int64_t>("original_max_position_embeddings");
  raw.short_factor = keys.read<std::vector<double>>("short_factor");
  raw.long_factor = keys.read<std::vector<double>>("long_factor");
  raw.truncate = keys.read<bool>("truncate");
  return rope;
}

bool rope_parameters_per_layer_type(const ConfigReader& config_json) {
  Field<ConfigReader> parameters = config_json.read<ConfigReader>("rope_parameters");
  return parameters.value && (parameters.value->has("full_attention") || parameters.value->has("sliding_attention"));
}

Field<RawRope> read_single_rope_parameters(const ConfigReader& config_json) {
  if (rope_parameters_per_layer_type(config_json)) return {};
  return read_rope(config_json, "rope_parameters");
}

namespace {

// longrope as transformers 5 computes it: the pretrained context is the rope's original_max_position_embeddings,
// or the config's (Phi-3 keeps it beside max_position_embeddings); without an explicit factor, the context's
// growth max_position_embeddings / original sets the default attention factor.
void resolve_longrope(const RawRope& r, const ConfigReader& config_json, const char* key, RopeSpec& spec) {
  spec.type = RopeType::kLongRope;
  if (!r.short_factor.value || !r.long_factor.value) {
    fail("{} of rope_type 'longrope' needs 'short_factor' and 'long_factor'", config_json.where(key));
  }
  spec.short_factors = *r.short_factor.value;
  spec.long_factors = *r.long_factor.value;
  const auto frequencies = static_cast<size_t>(spec.rotary_dim / 2);
  if (spec.short_factors.size() != frequencies || spec.long_factors.size() != frequencies) {
    fail("{}: 'short_factor' has {} entries and 'long_factor' {}, but the rotary dimension {} has {} frequencies",
         config_json.where(key), spec.short_factors.size(), spec.long_factors.size(), spec.rotary_dim, frequencies);
  }
  const Field<int64_t> max_positions = config_json.read<int64_t>("max_position_embeddings");
  int64_t original = r.original_max_position_embeddings.value_or(
      config_json.read<int64_t>("original_max_position_embeddings").value_or(max_positions.value_or(0)));
  if (original <= 0) {
    fail("{} of rope_type 'longrope' needs a positive 'original_max_position_embeddings'", config_json.where(key));
  }
  spec.original_max_position_embeddings = original;
  spec.factor = r.factor.value_or(static_cast<double>(max_positions.value_or(original)) / static_cast<double>(original));
  spec.attention_factor = r.attention_factor.value_or(
      spec.factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(spec.factor) / std::log(static_cast<double>(original))));
}

// YaRN as transformers 5 computes it (_compute_yarn_parameters): the pretrained context is the rope's
// original_max_position_embeddings (or the config's); without a factor, max_position_embeddings / that context;
// without an attention factor, 0.1 ln(factor) + 1, or DeepSeek's ratio of two such terms weighted by mscale and
// mscale_all_dim when both are set. A beta of 0 counts as unset, as Python's `or` reads it.
void resolve_yarn(const RawRope& r, const ConfigReader& config_json, const char* key, RopeSpec& spec) {
  spec.type = RopeType::kYarn;
  const Field<int64_t> max_positions = config_json.read<int64_t>("max_position_embeddings");
  const int64_t original = r.original_max_position_embeddings.value_or(
      config_json.read<int64_t>("original_max_position_embeddings").value_or(0));
  if (original <= 0) {
    fail("{} of rope_type 'yarn' needs a positive 'original_max_position_embeddings'", config_json.where(key));
  }
  spec.original_max_position_embeddings = original;
  spec.factor = r.factor.value_or(static_cast<double>(max_positions.value_or(original)) / static_cast<double>(original));
  auto mscale = [&](double weight) { return spec.factor <= 1.0 ? 1.0 : 0.1 * weight * std::log(spec.factor) + 1.0; };
  const double weight = r.mscale.value_or(0.0), all_dims = r.mscale_all_dim.value_or(0.0);
  spec.attention_factor =
      r.attention_factor.value_or(weight != 0.0 && all_dims != 0.0 ? mscale(weight) / mscale(all_dims) : mscale(1.0));
  spec.beta_fast = r.beta_fast.value_or(0.0) != 0.0 ? *r.beta_fast.value : 32.0;
  spec.beta_slow = r.beta_slow.value_or(0.0) != 0.0 ? *r.beta_slow.value : 1.0;
  spec.truncate = r.truncate.value_or(true);
}

}  // namespace

RopeSpec make_rope(const Field<RawRope>& rope, double theta, int64_t rotary_dim, const ConfigReader& config_json,
                   const char* key) {
  RopeSpec spec;
  spec.type = RopeType::kDefault;
  spec.theta = theta;
  spec.rotary_dim = rotary_dim;
  if (!rope.value) return spec;
  const RawRope& r = *rope.value;
  if (r.rope_theta.value) spec.theta = *r.rope_theta.value;
  std::string type = r.rope_type.value_or("default");
  if (type == "default") return spec;
  auto factor = [&] {
    if (!r.factor.value) fail("{} of rope_type '{}' needs a 'factor'", config_json.where(key), type);
    return *r.factor.value;
  };
  if (type == "linear") {
    spec.type = RopeType::kLinear;
    spec.factor = factor();
  } else if (type == "llama3") {
    spec.type = RopeType::kLlama3;
    spec.factor = factor();
    spec.low_freq_factor = r.low_freq_factor.value_or(1.0);
    spec.high_freq_factor = r.high_freq_factor.value_or(4.0);
    spec.original_max_position_embeddings = r.original_max_position_embeddings.value_or(8192);
    if (spec.high_freq_factor == spec.low_freq_factor) {
      fail("{} has equal low_freq_factor and high_freq_factor", config_json.where(key));
    }
  } else if (type == "longrope") {
    resolve_longrope(r, config_json, key, spec);
  } else if (type == "yarn") {
    resolve_yarn(r, config_json, key, spec);
  } else if (type == "proportional") {
    spec.type = RopeType::kProportional;
    spec.factor = r.factor.value_or(1.0);
    spec.rotated_fraction = r.partial_rotary_factor.value_or(1.0);
    if (!(spec.rotated_fraction > 0 && spec.rotated_fraction <= 1)) {
      fail("{}: partial_rotary_factor {} must be in (0, 1]", config_json.where(key), spec.rotated_fraction);
    }
  } else {
    fail("{} has rope_type '{}', which is not supported (supported: default, linear, llama3, longrope, yarn, "
         "proportional)",
         config_json.where(key), type);
  }
  return spec;
}

RopeSpec resolve_single_rope(const ConfigReader& config_json, double default_theta, int64_t rotary_dim) {
  // rope_parameters' own rope_theta, when it has one, overrides this (make_rope).
  const double theta = config_json.read<double>("rope_theta").value_or(default_theta);
  Field<RawRope> parameters = read_single_rope_parameters(config_json);
  if (parameters.value) return make_rope(parameters, theta, rotary_dim, config_json, "rope_parameters");
  return make_rope(read_rope(config_json, "rope_scaling"), theta, rotary_dim, config_json, "rope_scaling");
}

LayerTypeRopes resolve_layer_type_ropes(const ConfigReader& config_json, int64_t rotary_dim, double full_theta,
                                        double sliding_theta) {
  if (rope_parameters_per_layer_type(config_json)) {
    const ConfigReader per_type = *config_json.read<ConfigReader>("rope_parameters").value;
    return {make_rope(read_rope(per_type, "full_attention"), full_theta, rotary_dim, per_type, "full_attention"),
            make_rope(read_rope(per_type, "sliding_attention"), sliding_theta, rotary_dim, per_type, "sliding_attention")};
  }
  // The older layout: rope_scaling scales the full-attention layers only.
  return {resolve_single_rope(config_json, full_theta, rotary_dim),
          make_rope({}, sliding_theta, rotary_dim, config_json, "rope_theta")};
}

double read_rotary_fraction(const ConfigReader& config_json, std::initializer_list<const char*> keys, double fallback) {
  double fraction = fallback;
  for (auto key = std::rbegin(keys); key != std::rend(keys); ++key) {
    fraction = config_json.read<double>(*key).value_or(fraction);
  }
  Field<RawRope> parameters = read_single_rope_parameters(config_json);
  if (parameters.value && parameters.value->partial_rotary_factor.value) {
    fraction = *parameters.value->partial_rotary_factor.value;
  }
  if (!(fraction > 0 && fraction <= 1)) {
    fail("{}: the rotary fraction {} must be in (0, 1]", config_json.source(), fraction);
  }
  return fraction;
}

}  // namespace probekit::model
