// The MLP activations of the supported families (a header of its own so CUDA code can use it).
#pragma once

#include <string>

namespace probekit::model {

/// kClampedSwiglu (gpt-oss's experts): with gate g and up u clamped by the limit L (g <= L, -L <= u <= L),
/// (u + 1) * g * sigmoid(1.702 g); its limit is RoutedExpertsSpec::swiglu_limit.
enum class Activation { kSilu, kGeluTanh, kGeluExact, kClampedSwiglu };

/// The sigmoid's gain in the clamped SwiGLU (GptOssConfig's swiglu_alpha; the family refuses other values).
constexpr float kClampedSwigluAlpha = 1.702f;

/// The Hugging Face name of an activation ("silu", "gelu_pytorch_tanh", "gelu").
std::string activation_name(Activation activation);

}  // namespace probekit::model
