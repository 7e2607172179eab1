#include "steering/vector_file.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <fstream>
#include <regex>

#include "common/error.h"
#include "common/files.h"
#include "io/gguf.h"
#include "io/safetensors.h"

namespace probekit::steering {

namespace {

constexpr const char* kModelHintKey = "controlvector.model_hint";

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The layer of a tensor named `prefix`.{L}; throws naming the file otherwise.
int64_t layer_of(const std::string& name, const char* prefix, const std::string& path) {
  std::smatch match;
  const std::regex pattern(std::string("^") + prefix + R"(\.(\d{1,9})$)");
  if (!std::regex_match(name, match, pattern)) {
    fail("{}: tensor '{}' is not a steering vector (expected {}.{{L}}, L the decoder layer counted from 0)", path, name,
         prefix);
  }
  return std::stoll(match[1].str());
}

void add_layer(VectorFile& file, int64_t layer, std::vector<float> values, const std::string& path,
               const std::string& name) {
  if (values.empty()) fail("{}: tensor '{}' is empty", path, name);
  if (!file.layers.empty() && static_cast<int64_t>(values.size()) != file.width()) {
    fail("{}: tensor '{}' holds {} values where the file's other vectors hold {}", path, name, values.size(), file.width());
  }
  if (!file.layers.emplace(layer, std::move(values)).second) fail("{}: two vectors for layer {}", path, layer);
}

VectorFile read_gguf(const std::string& path) {
  gguf::File gguf = gguf::read_file(path);
  VectorFile file;
  if (const gguf::Metadata* hint = gguf.find(kModelHintKey); hint != nullptr && hint->value.is_string()) {
    file.model_hint = hint->value.get<std::string>();
  }
  for (gguf::Tensor& tensor : gguf.tensors) {
    if (tensor.shape.size() != 1) fail("{}: tensor '{}' is not one vector", path, tensor.name);
    add_layer(file, layer_of(tensor.name, "direction", path), std::move(tensor.values), path, tensor.name);
  }
  return file;
}

VectorFile read_safetensors(const std::string& path) {
  safetensors::File st(path);
  VectorFile file;
  file.metadata = st.metadata();
  if (auto hint = file.metadata.find("model_hint"); hint != file.metadata.end()) file.model_hint = hint->second;
  for (const safetensors::TensorInfo& info : st.tensors()) {
    if (info.dtype != safetensors::DType::kF32 || info.shape.size() != 1) {
      fail("{}: tensor '{}' is {} [{}], expected one float32 vector", path, info.name,
           safetensors::dtype_name(info.dtype), fmt::join(info.shape, ", "));
    }
    std::vector<float> values(static_cast<size_t>(info.numel()));
    std::memcpy(values.data(), st.data(info), info.nbytes());
    add_layer(file, layer_of(info.name, "layer", path), std::move(values), path, info.name);
  }
  return file;
}

void write_gguf(const std::string& path, const VectorFile& file) {
  gguf::File gguf;
  gguf.metadata.push_back({"general.architecture", gguf::ValueType::kString, false, "controlvector"});
  gguf.metadata.push_back({kModelHintKey, gguf::ValueType::kString, false, file.model_hint});
  gguf.metadata.push_back({"controlvector.layer_count", gguf::ValueType::kU32, false, file.layers.size()});
  for (const auto& [layer, values] : file.layers) {
    if (layer == 0) {
      fail_input("{}: a GGUF control vector cannot hold layer 0 (llama.cpp has no direction.0 and refuses a file with "
                 "one); write .safetensors, or leave layer 0 out",
                 path);
    }
    gguf.tensors.push_back({fmt::format("direction.{}", layer), {static_cast<int64_t>(values.size())}, values});
  }
  gguf::write_file(path, gguf);
}

void write_safetensors(const std::string& path, const VectorFile& file) {
  std::vector<safetensors::TensorData> tensors;
  for (const auto& [layer, values] : file.layers) {
    tensors.push_back({fmt::format("layer.{}", layer), safetensors::DType::kF32, {static_cast<int64_t>(values.size())},
                       values.data(), values.size() * sizeof(float)});
  }
  std::map<std::string, std::string> metadata = file.metadata;
  metadata["format"] = "probekit.steering_vectors";
  if (!file.model_hint.empty()) metadata["model_hint"] = file.model_hint;
  safetensors::write_file(path, tensors, metadata);
}

}  // namespace

int64_t VectorFile::width() const {
  return layers.empty() ? 0 : static_cast<int64_t>(layers.begin()->second.size());
}

VectorFile read_vector_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the steering vector file", path);
  char head[4] = {};
  in.read(head, 4);
  VectorFile file = std::memcmp(head, "GGUF", 4) == 0 ? read_gguf(path) : read_safetensors(path);
  if (file.layers.empty()) fail("{}: holds no steering vector", path);
  return file;
}

void write_vector_file(const std::string& path, const VectorFile& file) {
  if (file.layers.empty()) fail_input("{}: no vector to write", path);
  if (ends_with(path, ".gguf")) return write_gguf(path, file);
  if (ends_with(path, ".safetensors")) return write_safetensors(path, file);
  fail_usage("{}: a steering vector file is .safetensors (ours) or .gguf (llama.cpp's control vectors)", path);
}

}  // namespace probekit::steering
