#include "model/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/files.h"
#include "model/families.h"
#include "model/quantization.h"

namespace probekit::model {

ConfigReader::ConfigReader(const Json& object, std::string source, std::string key_path)
    : object_(&object), source_(std::move(source)), key_path_(std::move(key_path)) {}

template <typename T>
Field<T> ConfigReader::read(const char* key) const {
  Field<T> field;
  auto it = object_->find(key);
  if (it == object_->end()) return field;
  field.present = true;
  if (it->is_null()) return field;
  field.value = convert<T>(*it, key);
  return field;
}

bool ConfigReader::has(const char* key) const { return object_->contains(key); }

ConfigReader ConfigReader::with_source(std::string source) const { return ConfigReader(*object_, std::move(source)); }

std::string ConfigReader::where(const char* key) const { return fmt::format("{}: '{}{}'", source_, key_path_, key); }

template <typename T>
T ConfigReader::convert(const Json& value, const char* key) const {
  if constexpr (std::is_same_v<T, bool>) {
    if (!value.is_boolean()) fail("{} must be true or false", where(key));
    return value.get<bool>();
  } else if constexpr (std::is_same_v<T, int64_t>) {
    // Some exporters write integral values as 4096.0.
    if (value.is_number_integer()) return value.get<int64_t>();
    if (value.is_number_float() && std::floor(value.get<double>()) == value.get<double>() &&
        std::fabs(value.get<double>()) < 9e15) {
      return static_cast<int64_t>(value.get<double>());
    }
    fail("{} must be an integer", where(key));
  } else if constexpr (std::is_same_v<T, double>) {
    if (!value.is_number()) fail("{} must be a number", where(key));
    return value.get<double>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!value.is_string()) fail("{} must be a string", where(key));
    return value.get<std::string>();
  } else if constexpr (std::is_same_v<T, std::vector<std::string>> || std::is_same_v<T, std::vector<double>> ||
                       std::is_same_v<T, std::vector<int64_t>>) {
    using Item = typename T::value_type;
    const char* expected = std::is_same_v<Item, std::string> ? "a list of strings"
                           : std::is_same_v<Item, double>    ? "a list of numbers"
                                                             : "a list of integers";
    if (!value.is_array()) fail("{} must be {}", where(key), expected);
    T out;
    for (const Json& item : value) {
      bool fits = std::is_same_v<Item, std::string> ? item.is_string()
                  : std::is_same_v<Item, double>    ? item.is_number()
                                                    : item.is_number_integer();
      if (!fits) fail("{} must be {}", where(key), expected);
      out.push_back(item.get<Item>());
    }
    return out;
  } else {
    static_assert(std::is_same_v<T, ConfigReader>);
    if (!value.is_object()) fail("{} must be an object", where(key));
    return ConfigReader(value, source_, key_path_ + key + ".");
  }
}

// The types read() supports (config.h lists them); any other fails to link.
template Field<bool> ConfigReader::read<bool>(const char*) const;
template Field<int64_t> ConfigReader::read<int64_t>(const char*) const;
template Field<double> ConfigReader::read<double>(const char*) const;
template Field<std::string> ConfigReader::read<std::string>(const char*) const;
template Field<std::vector<std::string>> ConfigReader::read<std::vector<std::string>>(const char*) const;
template Field<std::vector<double>> ConfigReader::read<std::vector<double>>(const char*) const;
template Field<std::vector<int64_t>> ConfigReader::read<std::vector<int64_t>>(const char*) const;
template Field<ConfigReader> ConfigReader::read<ConfigReader>(const char*) const;

bool RopeSpec::operator==(const RopeSpec& o) const {
  return type == o.type && theta == o.theta && factor == o.factor && low_freq_factor == o.low_freq_factor &&
         high_freq_factor == o.high_freq_factor &&
         original_max_position_embeddings == o.original_max_position_embeddings && rotary_dim == o.rotary_dim &&
         short_factors == o.short_factors && long_factors == o.long_factors && attention_factor == o.attention_factor &&
         beta_fast == o.beta_fast && beta_slow == o.beta_slow && truncate == o.truncate &&
         rotated_fraction == o.rotated_fraction;
}

int64_t layer_head_dim(const ModelConfig& config, int64_t layer) {
  const int64_t own = config.layers.at(static_cast<size_t>(layer)).head_dim;
  return own > 0 ? own : config.head_dim;
}

int64_t layer_kv_heads(const ModelConfig& config, int64_t layer) {
  const int64_t own = config.layers.at(static_cast<size_t>(layer)).num_kv_heads;
  return own > 0 ? own : config.num_kv_heads;
}

std::vector<int64_t> routed_expert_layers(const ModelConfig& config) {
  std::vector<int64_t> layers;
  for (size_t i = 0; i < config.layers.size(); ++i) {
    if (config.layers[i].feed_forward == FeedForward::kRoutedExperts) layers.push_back(static_cast<int64_t>(i));
  }
  return layers;
}

bool has_recurrent_layers(const ModelConfig& config) {
  return std::any_of(config.layers.begin(), config.layers.end(),
                     [](const LayerSpec& layer) { return layer.mixer == Mixer::kGatedDeltaNet; });
}

int64_t longest_short_rope_sequence(const ModelConfig& config) {
  for (const LayerSpec& layer : config.layers) {
    if (layer.rope.type == RopeType::kLongRope) return layer.rope.original_max_position_embeddings;
  }
  return 0;
}

std::string activation_name(Activation activation) {
  switch (activation) {
    case Activation::kSilu: return "silu";
    case Activation::kGeluTanh: return "gelu_pytorch_tanh";
    case Activation::kGeluExact: return "gelu";
    case Activation::kClampedSwiglu: return "clamped swiglu";
  }
  return "?";
}

std::vector<std::string> supported_model_types() {
  std::vector<std::string> names;
  for (const Family& family : families()) names.emplace_back(family.model_type);
  return names;
}

ModelConfig resolve_config(const Json& json, const std::string& source) {
  if (!json.is_object()) fail("{}: expected a JSON object", source);
  const ConfigReader reader(json, source);
  const std::string model_type = reader.read<std::string>("model_type").value_or("");
  if (model_type.empty()) fail("{}: no 'model_type' key", source);
  const Family* family = find_family(model_type);
  if (family == nullptr) {
    fail("{}: unsupported model_type '{}' (supported: {})", source, model_type,
         fmt::join(supported_model_types(), ", "));
  }
  ModelConfig config;
  config.model_type = model_type;
  config.text_model_type = model_type;
  config.quantization = resolve_quantization(json, source);
  family->resolve(reader, config);
  validate_config(config, source);
  return config;
}

ModelConfig load_config(const std::string& checkpoint_dir) {
  std::string path = checkpoint_dir + "/config.json";
  if (!is_regular_file(path)) {
    fail("{}: no config.json (a model directory must hold config.json, *.safetensors and tokenizer.json)",
         checkpoint_dir);
  }
  return resolve_config(read_json_file(path), path);
}

}  // namespace probekit::model
