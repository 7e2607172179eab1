// Steering vectors on disk, one vector per decoder layer, `layer L` meaning the output of decoder layer L counted
// from 0 (what a probe of layer L reads, and what a forward hook on model.layers[L] returns). Two formats:
// - ours: safetensors with one float32 tensor `layer.{L}` [hidden] per layer, and string metadata;
// - GGUF control vectors, as llama.cpp's --control-vector reads them and repeng's export_gguf writes them:
//   general.architecture "controlvector", controlvector.model_hint, controlvector.layer_count (the number of
//   vectors), float32 tensors `direction.{L}`. llama.cpp adds tensors[il] after layer il, so direction.{L} is our
//   layer.{L}; it has no direction.0 (it refuses a file with one), so a vector for layer 0 is not written to GGUF.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace probekit::steering {

struct VectorFile {
  std::map<int64_t, std::vector<float>> layers;  // layer -> vector [hidden]
  std::string model_hint;  // the type of the model they were made for, as its config.json says ("gemma3_text")
  std::map<std::string, std::string> metadata;   // what made them (method, label, activations)

  /// The vectors' width (every layer's is the same).
  int64_t width() const;
};

/// Reads a .safetensors or .gguf vector file (by its first bytes); anything else, a tensor of another name or
/// width, or no vector at all, throws naming the file and the tensor.
VectorFile read_vector_file(const std::string& path);

/// Writes `file` as .gguf or .safetensors, by the path's extension (anything else is refused, as is layer 0 in GGUF).
void write_vector_file(const std::string& path, const VectorFile& file);

}  // namespace probekit::steering
